"""Frontends: the only places that know HTTP, JSON, protobuf or binary layouts."""
