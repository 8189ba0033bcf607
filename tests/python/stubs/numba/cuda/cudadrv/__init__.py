from . import driver  # noqa: F401
