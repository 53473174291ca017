"""Response caches: answers to repeated requests without executing the model."""
