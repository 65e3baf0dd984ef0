"""Access control: API keys from the environment and from a file, per-key plan visibility,
health endpoints open, and no public bind without keys."""

from __future__ import annotations

import pytest

from schemas.errors import ArenaplanError
from service.settings import check_bind_allowed, is_loopback, load_settings, parse_api_keys
from tests.support.fixture_zoo import model_path
from tests.support.service import ServiceProcess, cli, free_port, get, request_json, submit

ALICE = "alice-key-0123456789"  # from the keys file, namespace "alice"
BOB = "bob-key-9876543210"  # from ARENAPLAN_API_KEYS, namespace "bob"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("auth")
    keys = directory / "keys.txt"
    keys.write_text(f"# one key per line\nalice:{ALICE}\n")
    service = ServiceProcess(directory, workers=1, args=("--api-keys-file", str(keys)),
                             env={"ARENAPLAN_API_KEYS": f"bob:{BOB}"})
    service.start()
    yield service
    service.stop()


def test_every_endpoint_but_health_needs_a_key(server):
    url = server.url
    assert get(url, "/healthz").status_code == 200
    assert get(url, "/readyz").status_code == 200
    for path in ("/plans", f"/plans/{'a' * 32}", "/metrics"):
        for key in (None, "wrong-key-000000"):
            response = get(url, path, key)
            assert response.status_code == 401, (path, key, response.text)
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json()["error"] == "unauthorized"
    refused = submit(url, model_path("mlp_sgd"), request_json(time_limit_s=1))
    assert refused.status_code == 401 and "Authorization: Bearer" in refused.json()["detail"]
    basic = get(url, "/plans", headers={"Authorization": "Basic YWxpY2U6eA=="})
    assert basic.status_code == 401
    assert get(url, "/metrics", ALICE).status_code == 200


def test_plans_are_visible_only_to_the_key_that_submitted_them(server, tmp_path):
    url = server.url
    request = request_json(time_limit_s=1, seed=21)
    mine = submit(url, model_path("mlp_sgd"), request, key=ALICE)
    assert mine.status_code == 200, mine.text[:300]
    plan_id = mine.json()["plan_id"]
    assert get(url, f"/plans/{plan_id}", ALICE).status_code == 200
    assert get(url, f"/plans/{plan_id}", BOB).status_code == 404
    assert [p["plan_id"] for p in get(url, "/plans", ALICE).json()["plans"]] == [plan_id]
    assert get(url, "/plans", BOB).json()["plans"] == []

    out = tmp_path / "plan.json"
    as_bob = cli("fetch", plan_id, "--server", url, "-o", str(out),
                 env={"ARENAPLAN_API_KEY": BOB})
    assert as_bob.returncode == 2 and not out.exists()
    anonymous = cli("fetch", plan_id, "--server", url, "-o", str(out),
                    env={"ARENAPLAN_API_KEY": ""})
    assert anonymous.returncode == 2 and "401" in anonymous.stderr
    key_file = tmp_path / "alice.key"
    key_file.write_text(ALICE + "\n")
    as_alice = cli("fetch", plan_id, "--server", url, "-o", str(out), "--api-key-file",
                   str(key_file))
    assert as_alice.returncode == 0, as_alice.stderr
    assert out.read_bytes() == mine.content

    # Bob uploading the same model and request gets the stored plan, and sees it from then on.
    theirs = submit(url, model_path("mlp_sgd"), request, key=BOB)
    assert theirs.status_code == 200 and theirs.content == mine.content
    assert get(url, f"/plans/{plan_id}", BOB).status_code == 200


def test_non_loopback_bind_without_keys_is_refused(tmp_path, monkeypatch):
    port = str(free_port())
    refused = cli("serve", "--host", "0.0.0.0", "--port", port, "--db",
                  str(tmp_path / "x.db"), env={"ARENAPLAN_API_KEYS": ""}, timeout=60)
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without API keys" in refused.stderr
    assert not (tmp_path / "x.db").exists()
    monkeypatch.delenv("ARENAPLAN_API_KEYS", raising=False)
    monkeypatch.delenv("ARENAPLAN_API_KEYS_FILE", raising=False)
    settings = load_settings(db=str(tmp_path / "y.db"))
    with pytest.raises(ArenaplanError):
        check_bind_allowed("192.0.2.1", settings, allow_public_without_keys=False)
    check_bind_allowed("192.0.2.1", settings, allow_public_without_keys=True)
    monkeypatch.setenv("ARENAPLAN_API_KEYS", "k1-abcdefgh")
    keyed = load_settings(db=str(tmp_path / "y.db"))
    check_bind_allowed("0.0.0.0", keyed, allow_public_without_keys=False)
    for host in ("127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_bind_allowed(host, settings, allow_public_without_keys=False)
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.com"):
        assert not is_loopback(host)


def test_key_syntax_and_settings_errors(tmp_path, monkeypatch):
    keys = parse_api_keys("ns1:abcdefgh12, plainkey123 # comment\n\n", "test")
    assert keys["abcdefgh12"] == "ns1"
    assert keys["plainkey123"].startswith("key-")
    with pytest.raises(ArenaplanError, match="at least 8 characters"):
        parse_api_keys("ns:short", "test")
    with pytest.raises(ArenaplanError, match="cannot read the API keys file"):
        load_settings(api_keys_file=str(tmp_path / "missing"), db=str(tmp_path / "d"))
    with pytest.raises(ArenaplanError, match="ARENAPLAN_WORKERS"):
        monkeypatch.setenv("ARENAPLAN_WORKERS", "zero")
        load_settings(db=str(tmp_path / "d"))
    bad = cli("serve", "--port", str(free_port()), "--db", str(tmp_path / "z.db"),
              env={"ARENAPLAN_MAX_UPLOAD_BYTES": "-1"}, timeout=60)
    assert bad.returncode == 2 and "ARENAPLAN_MAX_UPLOAD_BYTES" in bad.stderr
