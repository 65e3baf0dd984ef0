"""The committed JSON Schema files are exactly what the pydantic models generate."""

from schemas.generate import SCHEMA_DIR, schema_files


def test_committed_json_schemas_match_the_models():
    expected = schema_files()
    committed = {p.name: p.read_text() for p in SCHEMA_DIR.glob("*.json")}
    assert set(committed) == set(expected), "run `make schemas` and commit schemas/json/"
    for name, text in expected.items():
        assert committed[name] == text, f"{name} is stale: run `make schemas` and commit it"
