"""A PostgreSQL database of its own for each host-project test, beside the test database."""

import psycopg
import pytest
from django.db import connection
from psycopg import sql


@pytest.fixture
def host_database(request):
    """The libpq variables (PGDATABASE, PGHOST, ...) of a new, empty database; dropped after."""
    db = connection.settings_dict
    name = f"{db['NAME']}_{request.module.__name__.rsplit('.', 1)[-1]}"
    admin = psycopg.connect(
        dbname="postgres",
        host=db.get("HOST") or "127.0.0.1",
        port=db.get("PORT") or 5432,
        user=db["USER"],
        password=db.get("PASSWORD") or None,
        autocommit=True,
    )
    with admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield {
            "PGDATABASE": name,
            "PGHOST": db.get("HOST") or "127.0.0.1",
            "PGPORT": str(db.get("PORT") or 5432),
            "PGUSER": db["USER"],
            "PGPASSWORD": db.get("PASSWORD") or "",
        }
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
