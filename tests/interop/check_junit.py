#!/usr/bin/env python3
"""Reads a run's JUnit XML with a third-party JUnit parser (the `junitparser` package).

Usage: check_junit.py RUN_DIR EXPECTED_FAILING_CASE...

Checks that the file parses, that it has one test case per case of the report, and that
exactly the named cases are failures. Exits 0 when all hold.
"""
import base64
import json
import pathlib
import sys

from junitparser import Failure, JUnitXml

run = pathlib.Path(sys.argv[1])
expected = set(sys.argv[2:])
xml = JUnitXml.fromfile(str(run / "report.junit.xml"))
cases = [case for suite in xml for case in suite]
statement = json.loads(base64.b64decode(json.loads((run / "report.dsse.json").read_text())["payload"]))
ids = {c["id"] for c in statement["predicate"]["cases"]}
assert {c.name for c in cases} == ids, f"test cases {sorted(c.name for c in cases)} != report cases {sorted(ids)}"
failing = {c.name for c in cases if any(isinstance(r, Failure) for r in c.result)}
assert failing == expected, f"failures {sorted(failing)}, expected {sorted(expected)}"
print(f"junitparser: {len(cases)} test cases, failures exactly {sorted(failing)}")
