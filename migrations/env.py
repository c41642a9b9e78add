"""Alembic environment for metis_pg.

Online: uses the live connection put in ``config.attributes["connection"]`` by
:mod:`metis_pg.migrate` (so ``metis db upgrade`` and test fixtures migrate
in-process), else connects to ``sqlalchemy.url``. Offline (``--sql``): emits SQL.
"""

from alembic import context
from sqlalchemy import create_engine

config = context.config


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True,
                      dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
