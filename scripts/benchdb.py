"""Shared by the scripts: a database of their own on the server of DATABASE_URL."""

from urllib.parse import urlsplit, urlunsplit


def ensure_database(url: str, name: str) -> None:
    """Create database ``name`` on the server of ``url`` when it does not exist yet."""
    import psycopg

    admin_url = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")
