"""The aten op table, one module per op group; importing this package fills it."""
from . import copies, factories, views  # noqa: F401
