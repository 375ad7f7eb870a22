#!/usr/bin/env python3
"""Validates the project's data files and a run's report against reports/schema/.

Usage: validate_schemas.py [RUN_DIR | MERGE_DIR | CHALLENGE.json]...

With the third-party `jsonschema` package (draft 2020-12): every vendor profile under
vendors/, every case and advisory under suite/ (TOML read with tomllib), and the report
inside the envelope of each example under reports/examples/ and of each run folder given
(a merge folder's summary, against the summary schema; a logged run's log-end.json),
and each challenge file given. Exits 0 when all are valid.
"""
import base64
import json
import pathlib
import sys
import tomllib

from jsonschema import Draft202012Validator

root = pathlib.Path(__file__).resolve().parents[2]
schemas = {
    name: Draft202012Validator(json.loads((root / "reports/schema" / f"{name}.schema.json").read_text()))
    for name in ("report", "summary", "policy", "vendor", "case", "advisory", "command", "challenge", "log-end")
}
for schema in schemas.values():
    Draft202012Validator.check_schema(schema.schema)

checked = 0
def check(kind, path, value):
    global checked
    errors = sorted(schemas[kind].iter_errors(value), key=lambda e: list(e.path))
    if errors:
        for e in errors:
            print(f"{path}: {'/'.join(map(str, e.path)) or '(top)'}: {e.message}")
        sys.exit(1)
    checked += 1

for path in sorted((root / "vendors").glob("*.toml")):
    check("vendor", path, tomllib.loads(path.read_text()))
for path in sorted((root / "examples").glob("policy*.toml")):
    check("policy", path, tomllib.loads(path.read_text()))
for suite in ("suite", "tests/engines/llama-suite"):
    for path in sorted((root / suite).rglob("*.toml")):
        kind = "advisory" if "advisories" in path.parts else "case"
        check(kind, path, tomllib.loads(path.read_text()))
# Lines of the external-command protocol, as the adapter and examples/command-adapter.py write them.
for line in (
    {"id": 1, "op": "chat", "credential": "k", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True},
    {"id": 2, "op": "invalid", "credential": "k", "invalid": {"over-limit": {"context": 8192}}},
    {"id": 1, "delta": "Hello"},
    {"id": 1, "done": {"status": 200, "content": "Hello", "finish_reason": "stop", "raw": "{}",
                       "usage": {"prompt_tokens": 9, "completion_tokens": 1}, "error": None}},
):
    check("command", "command line", line)
args = [pathlib.Path(a) for a in sys.argv[1:]]
for path in (a for a in args if a.is_file()):
    check("challenge", path, json.loads(path.read_text()))
runs = [a for a in args if a.is_dir()] + sorted((root / "reports/examples").glob("*/"))
for run in runs:
    if (run / "log-end.json").exists():
        check("log-end", run / "log-end.json", json.loads((run / "log-end.json").read_text()))
    kind, name = ("summary", "summary.dsse.json") if (run / "summary.dsse.json").exists() else ("report", "report.dsse.json")
    envelope = json.loads((run / name).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    check(kind, run / name, statement["predicate"])
print(f"jsonschema: {checked} files valid against reports/schema/")
