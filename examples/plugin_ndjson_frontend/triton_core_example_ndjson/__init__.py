"""An example triton-core frontend plugin: inference as JSON lines over TCP."""
