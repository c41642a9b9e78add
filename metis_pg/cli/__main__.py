"""``python -m metis_pg.cli``: the ``metis`` command."""

from . import script

script()
