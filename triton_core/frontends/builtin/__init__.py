"""The built-in frontends, each a plugin registered like a third-party one (see
:data:`triton_core.plugins.manager.DEFAULT_PLUGINS`): HTTP/REST, gRPC, metrics, SageMaker and
Vertex AI. ``--disable-plugin http_frontend`` (and so on) leaves one out."""
