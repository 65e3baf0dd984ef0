"""Every setting of the service: `ARENAPLAN_<FIELD>` variables, read by pydantic-settings.

Variables (all optional; `arenaplan serve` options override them):

| variable | default | meaning |
|---|---|---|
| ARENAPLAN_DATA_DIR | $XDG_DATA_HOME/arenaplan (~/.local/share/arenaplan) | SQLite, models |
| ARENAPLAN_DB | DATA_DIR/arenaplan.db | a SQLite file, or a URL: postgresql+psycopg://U:P@H/DB |
| ARENAPLAN_MODEL_DIR | beside the SQLite file, else DATA_DIR/models | content-addressed models |
| ARENAPLAN_WORKERS | half the CPU cores, at least 1 | solver processes |
| ARENAPLAN_API_KEYS | none | comma-separated keys, each `KEY` or `NAMESPACE:KEY` |
| ARENAPLAN_API_KEYS_FILE | none | a file with one key per line, same syntax, `#` comments |
| ARENAPLAN_MAX_UPLOAD_BYTES | 512 MiB | largest model accepted |
| ARENAPLAN_MAX_REQUEST_BYTES | 64 MiB | largest request JSON (it may carry a profile) |
| ARENAPLAN_BODY_READ_TIMEOUT_S | 60 | an upload that sends nothing this long is cut off (408) |
| ARENAPLAN_DEFAULT_WAIT_S / ARENAPLAN_MAX_WAIT_S | 30 / 600 | `?wait=` of POST /plan |
| ARENAPLAN_MAX_TIME_LIMIT_S | 3600 | largest `time_limit_s` a request may ask for |
| ARENAPLAN_JOB_GRACE_S | 120 | a job is killed `time_limit_s` + this many seconds after it starts |
| ARENAPLAN_JOB_TIMEOUT_S | 3900 | ... and never later than this |
| ARENAPLAN_MAX_ATTEMPTS | 2 | runs of a job interrupted by restarts before it is marked failed |
| ARENAPLAN_LEASE_S | 20 | a running job whose instance stopped heart-beating is re-queued |
| ARENAPLAN_MAX_QUEUED | 1000 | queued jobs beyond which POST /plan answers 429 |
| ARENAPLAN_WORKER_START_TIMEOUT_S | 120 | how long a new solver process may take to start |
| ARENAPLAN_MEASURE_DEVICES | cpu | devices solvers measure; budgets elsewhere need a profile |
| ARENAPLAN_MODEL_RETENTION_S | 30 days | models idle longer go unless a job needs them (0: keep) |
| ARENAPLAN_PLAN_CACHE_BYTES | 64 MiB | memory for recently fetched plans (0: read their files) |

Names are matched without regard to case (pydantic-settings' rule); other `ARENAPLAN_*`
variables (the client's `ARENAPLAN_API_KEY`, the profile cache's `ARENAPLAN_CACHE_DIR`) are not
settings of the service and are ignored here. A blank DATA_DIR, DB, MODEL_DIR, API_KEYS or
API_KEYS_FILE counts as unset; a blank number is an error.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from schemas.errors import ArenaplanError
from schemas.plan import check_device_name

ENV_PREFIX = "ARENAPLAN_"
MiB = 2**20


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "arenaplan"


def default_workers() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


class Settings(BaseSettings):
    """The service's configuration; build it with `load_settings`.

    Each field is the variable `ARENAPLAN_<FIELD>`; keyword arguments override the environment.
    The locations are resolved once here, so `db` is always a SQLAlchemy URL and `model_dir` a
    path, and `api_keys` holds the keys of both ARENAPLAN_API_KEYS and the keys file.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    data_dir: Path
    db: str = Field(description="SQLAlchemy URL (the variable may also be a SQLite file path)")
    model_dir: Path
    workers: int = Field(default_factory=default_workers, ge=1, le=256)
    api_keys_file: Path | None = None
    api_keys: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="API key -> namespace; empty: no authentication"
    )
    max_upload_bytes: int = Field(default=512 * MiB, ge=1)
    max_request_bytes: int = Field(default=64 * MiB, ge=1024)
    body_read_timeout_s: float = Field(default=60.0, gt=0)
    default_wait_s: float = Field(default=30.0, ge=0)
    max_wait_s: float = Field(default=600.0, ge=0)
    max_time_limit_s: float = Field(default=3600.0, gt=0)
    job_grace_s: float = Field(default=120.0, ge=0)
    job_timeout_s: float = Field(default=3900.0, gt=0)
    max_attempts: int = Field(default=2, ge=1)
    lease_s: float = Field(default=20.0, gt=0)
    max_queued: int = Field(default=1000, ge=1)
    worker_start_timeout_s: float = Field(default=120.0, gt=0)
    plan_cache_bytes: int = Field(default=64 * MiB, ge=0)
    model_retention_s: float = Field(default=30 * 86400.0, ge=0)
    measure_devices: Annotated[tuple[str, ...], NoDecode] = ("cpu",)

    @model_validator(mode="before")
    @classmethod
    def _place_files(cls, values: dict[str, Any]) -> dict[str, Any]:
        """DATA_DIR, DB and MODEL_DIR default to one another, as the table above says."""
        data_dir = Path(str(values.get("data_dir") or default_data_dir())).expanduser()
        db = database_url_for(str(values.get("db") or data_dir / "arenaplan.db"))
        model_dir = values.get("model_dir")
        if not model_dir:
            db_file = sqlite_path(db)
            model_dir = db_file.parent / "models" if db_file else data_dir / "models"
        return {**values, "data_dir": data_dir, "db": db,
                "model_dir": Path(str(model_dir)).expanduser()}

    @model_validator(mode="before")
    @classmethod
    def _gather_api_keys(cls, values: dict[str, Any]) -> dict[str, Any]:
        """The keys of ARENAPLAN_API_KEYS, then those of the keys file (a key in both: the file's
        namespace)."""
        keys = values.get("api_keys") or {}
        if isinstance(keys, str):
            keys = parse_api_keys(keys, ENV_PREFIX + "API_KEYS")
        keys_file = values.get("api_keys_file") or None
        if keys_file:
            keys = {**keys, **read_api_keys_file(keys_file)}
        return {**values, "api_keys": keys, "api_keys_file": keys_file}

    @field_validator("measure_devices", mode="before")
    @classmethod
    def _device_list(cls, value: Any) -> tuple[str, ...]:
        """`cpu,cuda:0` (the variable) or a sequence; each a device name of a budget."""
        names = value.split(",") if isinstance(value, str) else list(value)
        return tuple(check_device_name(str(name).strip()) for name in names if str(name).strip())

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)

    def job_time_limit(self, request_time_limit_s: float) -> float:
        """Wall-clock seconds a job may run before its solver process is killed."""
        return min(self.job_timeout_s, request_time_limit_s + self.job_grace_s)


def database_url_for(db: str) -> str:
    """`--db` value -> SQLAlchemy URL: URLs pass through, anything else is a SQLite file path."""
    if "://" in db:
        return db
    return f"sqlite:///{Path(db).expanduser().resolve()}"


def sqlite_path(database_url: str) -> Path | None:
    prefix = "sqlite:///"
    if database_url.startswith(prefix) and database_url != prefix + ":memory:":
        return Path(database_url[len(prefix):])
    return None


def parse_api_keys(text: str, source: str) -> dict[str, str]:
    """`KEY` or `NAMESPACE:KEY` per line (or comma); `#` starts a comment. Key -> namespace."""
    keys: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        namespace, sep, key = line.partition(":")
        if not sep:
            namespace, key = "", line
        namespace, key = namespace.strip(), key.strip()
        if len(key) < 8 or any(c.isspace() for c in key):
            raise ArenaplanError(
                f"{source}: API keys need at least 8 characters and no spaces; fix or remove "
                f"the entry starting {key[:3]!r}"
            )
        keys[key] = namespace or _anonymous_namespace(key)
    return keys


def _anonymous_namespace(key: str) -> str:
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def read_api_keys_file(path: str | Path) -> dict[str, str]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ArenaplanError(f"cannot read the API keys file {path}: {exc.strerror}") from None
    keys = parse_api_keys(text, str(path))
    if not keys:
        raise ArenaplanError(f"the API keys file {path} holds no key")
    return keys


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (`ARENAPLAN_*`), then explicit overrides (None = unset).

    Overrides accept the field names of `Settings` (`db` a path or URL). Raises
    `ArenaplanError` naming the bad variable or value, never a pydantic traceback.
    """
    given = {name: value for name, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        problems = "; ".join(f"{_env_name(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ArenaplanError(f"bad service setting: {problems}") from None


def _env_name(loc: tuple[int | str, ...]) -> str:
    return ENV_PREFIX + str(loc[0]).upper() if loc else "settings"

def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind_allowed(host: str, settings: Settings, allow_public_without_keys: bool) -> None:
    """Refuse to serve a non-loopback address without API keys, unless explicitly allowed."""
    if is_loopback(host) or settings.auth_enabled or allow_public_without_keys:
        return
    raise ArenaplanError(
        f"refusing to listen on {host} without API keys: anyone who can reach it could submit "
        "jobs and read every plan. Configure keys (--api-keys-file F or ARENAPLAN_API_KEYS), "
        "bind 127.0.0.1, or pass --allow-public-without-keys if the network is trusted"
    )
