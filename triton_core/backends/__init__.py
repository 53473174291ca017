"""The contract backends implement, and what they may call."""
