"""Methods as plug-ins: see :mod:`edv_ray.methods.registry` (the protocol and registry)
and :mod:`edv_ray.methods.steps` (the reusable steps methods compose)."""

from edv_ray.methods.registry import Method, get_method, known_methods, register

__all__ = ["Method", "get_method", "known_methods", "register"]
