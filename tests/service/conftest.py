"""Fixtures of the service tests: the store's database on SQLite and on a private PostgreSQL.

The PostgreSQL cluster (`tests.support.postgres`) starts once per session, at the first test
that asks for it, and stops at the end; each test gets a database of its own. Where the
cluster cannot run (no PostgreSQL installed) its tests skip and say why, unless
ARENAPLAN_REQUIRE_POSTGRES is set, as `.ci/run` does: then they fail, so CI never silently
tests SQLite alone.
"""

from __future__ import annotations

import os
import uuid

import pytest

from tests.support.postgres import PostgresCluster, PostgresUnavailable

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def postgres_cluster():
    try:
        cluster = PostgresCluster().start()
    except PostgresUnavailable as exc:
        if os.environ.get("ARENAPLAN_REQUIRE_POSTGRES"):
            pytest.fail(f"ARENAPLAN_REQUIRE_POSTGRES is set but PostgreSQL cannot run: {exc}")
        pytest.skip(f"PostgreSQL tests need a local PostgreSQL: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster):
    """A fresh, empty database in the session's cluster; dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    url = postgres_cluster.create_database(name)
    yield url
    postgres_cluster.drop_database(name)


@pytest.fixture(params=BACKENDS)
def database_url(request, tmp_path):
    """An empty store database, once on a SQLite file and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("postgres_url")
