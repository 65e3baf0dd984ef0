"""Service settings read by pydantic-settings: the `ARENAPLAN_*` names, defaults and how the
locations default to one another, plus the edges where the library's rules meet ours (unknown
variables, case, blank values, bad numbers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from schemas.errors import ArenaplanError
from service.settings import MiB, Settings, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No `ARENAPLAN_*` variable of the caller's shell, and a data home inside tmp_path."""
    for name in list(os.environ):
        if name.upper().startswith("ARENAPLAN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def test_defaults(tmp_path):
    settings = load_settings()
    data_dir = tmp_path / "xdg" / "arenaplan"
    assert settings.data_dir == data_dir
    assert settings.db == f"sqlite:///{data_dir / 'arenaplan.db'}"
    assert settings.model_dir == data_dir / "models"
    assert settings.workers == max(1, (os.cpu_count() or 2) // 2)
    assert settings.api_keys == {} and not settings.auth_enabled
    assert (settings.max_upload_bytes, settings.max_request_bytes) == (512 * MiB, 64 * MiB)
    assert (settings.default_wait_s, settings.max_wait_s) == (30, 600)
    assert (settings.max_time_limit_s, settings.job_grace_s, settings.job_timeout_s) == (
        3600, 120, 3900)
    assert (settings.max_attempts, settings.lease_s, settings.max_queued) == (2, 20, 1000)
    assert settings.worker_start_timeout_s == 120
    assert settings.job_time_limit(60) == 180 and settings.job_time_limit(10_000) == 3900


def test_every_field_is_a_variable(monkeypatch, tmp_path):
    values = {"WORKERS": "3", "MAX_UPLOAD_BYTES": "2048", "MAX_REQUEST_BYTES": "4096",
              "DEFAULT_WAIT_S": "1.5", "MAX_WAIT_S": "9", "MAX_TIME_LIMIT_S": "60",
              "JOB_GRACE_S": "5", "JOB_TIMEOUT_S": "70", "MAX_ATTEMPTS": "4", "LEASE_S": "7",
              "MAX_QUEUED": "11", "WORKER_START_TIMEOUT_S": "13"}
    for name, value in values.items():
        monkeypatch.setenv("ARENAPLAN_" + name, value)
    settings = load_settings()
    for name, value in values.items():
        assert getattr(settings, name.lower()) == float(value), name


def test_locations_default_to_one_another(monkeypatch, tmp_path):
    monkeypatch.setenv("ARENAPLAN_DATA_DIR", str(tmp_path / "data"))
    assert load_settings().model_dir == tmp_path / "data" / "models"
    monkeypatch.setenv("ARENAPLAN_DB", str(tmp_path / "elsewhere" / "a.db"))
    beside = load_settings()
    assert beside.db == f"sqlite:///{tmp_path / 'elsewhere' / 'a.db'}"
    assert beside.model_dir == tmp_path / "elsewhere" / "models"
    monkeypatch.setenv("ARENAPLAN_DB", "postgresql+psycopg://u:pw@host/db")
    remote = load_settings()
    assert remote.db == "postgresql+psycopg://u:pw@host/db"
    assert remote.model_dir == tmp_path / "data" / "models"
    monkeypatch.setenv("ARENAPLAN_MODEL_DIR", str(tmp_path / "m"))
    assert load_settings().model_dir == tmp_path / "m"


def test_overrides_beat_the_environment_and_none_means_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("ARENAPLAN_WORKERS", "3")
    monkeypatch.setenv("ARENAPLAN_DB", str(tmp_path / "env.db"))
    assert load_settings(workers=5).workers == 5
    assert load_settings(workers=None).workers == 3
    assert load_settings(db=str(tmp_path / "cli.db")).db.endswith("cli.db")
    with pytest.raises(ArenaplanError, match="ARENAPLAN_NO_SUCH_FIELD"):
        load_settings(no_such_field=1)


def test_api_keys_from_the_variable_and_the_file(monkeypatch, tmp_path):
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("# comment\nalice:alice-key-0123\n")
    monkeypatch.setenv("ARENAPLAN_API_KEYS", "bob:bob-key-98765, plainkey123")
    monkeypatch.setenv("ARENAPLAN_API_KEYS_FILE", str(keys_file))
    keys = load_settings().api_keys
    assert keys["alice-key-0123"] == "alice" and keys["bob-key-98765"] == "bob"
    assert keys["plainkey123"].startswith("key-")
    assert load_settings(api_keys_file=None).auth_enabled
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ArenaplanError, match="holds no key"):
        load_settings(api_keys_file=str(empty))
    monkeypatch.setenv("ARENAPLAN_API_KEYS", "ns:short")
    with pytest.raises(ArenaplanError, match="ARENAPLAN_API_KEYS: API keys need at least 8"):
        load_settings()


def test_other_arenaplan_variables_are_ignored(monkeypatch):
    """pydantic-settings reads only the fields' names; the client's and the cache's variables
    (and typos) share the prefix without being settings of the service."""
    monkeypatch.setenv("ARENAPLAN_API_KEY", "client-key-123456")
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", "/nowhere")
    monkeypatch.setenv("ARENAPLAN_WORKER", "not-a-number")
    settings = load_settings()
    assert not settings.auth_enabled
    assert settings == load_settings()


def test_names_match_without_regard_to_case(monkeypatch):
    """The library's rule (today's hand-written reader matched upper case only)."""
    monkeypatch.setenv("arenaplan_workers", "7")
    assert load_settings().workers == 7


def test_blank_locations_and_keys_are_unset_but_a_blank_number_is_an_error(monkeypatch, tmp_path):
    for name in ("DATA_DIR", "DB", "MODEL_DIR", "API_KEYS", "API_KEYS_FILE"):
        monkeypatch.setenv("ARENAPLAN_" + name, "")
    settings = load_settings()
    assert settings.data_dir == tmp_path / "xdg" / "arenaplan"
    assert settings.model_dir == settings.data_dir / "models"
    assert settings.api_keys == {} and settings.api_keys_file is None
    monkeypatch.setenv("ARENAPLAN_MAX_QUEUED", "")
    with pytest.raises(ArenaplanError, match="ARENAPLAN_MAX_QUEUED: Input should be a valid"):
        load_settings()


def test_bad_values_name_every_variable_in_one_message(monkeypatch):
    monkeypatch.setenv("ARENAPLAN_WORKERS", "2.5")
    monkeypatch.setenv("ARENAPLAN_LEASE_S", "soon")
    monkeypatch.setenv("ARENAPLAN_MAX_REQUEST_BYTES", "10")
    with pytest.raises(ArenaplanError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("bad service setting: ")
    for expected in ("ARENAPLAN_WORKERS: Input should be a valid integer",
                     "ARENAPLAN_LEASE_S: Input should be a valid number",
                     "ARENAPLAN_MAX_REQUEST_BYTES: Input should be greater than or equal to 1024"):
        assert expected in message
    with pytest.raises(ArenaplanError, match="ARENAPLAN_WORKERS: Input should be less than"):
        load_settings(workers=1000)


def test_settings_are_frozen():
    settings = load_settings()
    with pytest.raises(ValueError):
        settings.workers = 2  # type: ignore[misc]
    assert isinstance(settings, Settings) and isinstance(settings.model_dir, Path)


def test_measure_devices_and_plan_cache(monkeypatch):
    settings = load_settings()
    assert settings.measure_devices == ("cpu",) and settings.plan_cache_bytes == 64 * MiB
    monkeypatch.setenv("ARENAPLAN_MEASURE_DEVICES", "cpu, cuda:0")
    monkeypatch.setenv("ARENAPLAN_PLAN_CACHE_BYTES", "0")
    settings = load_settings()
    assert settings.measure_devices == ("cpu", "cuda:0") and settings.plan_cache_bytes == 0
    monkeypatch.setenv("ARENAPLAN_MEASURE_DEVICES", "gpu")
    with pytest.raises(ArenaplanError, match="ARENAPLAN_MEASURE_DEVICES: .*unknown device 'gpu'"):
        load_settings()
