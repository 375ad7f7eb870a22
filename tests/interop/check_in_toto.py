#!/usr/bin/env python3
"""The run's in-toto attestations read by third-party implementations.

Usage: check_in_toto.py RUN_DIR [SVR_FILE BUYER_PUBLIC_PEM]

With `in-toto-attestation` (the in-toto project's Python bindings: Statement v1,
ResourceDescriptor and the Test Result predicate as protocol buffers) and
`securesystemslib` (DSSE), checks that:
- RUN_DIR/test-result.dsse.json verifies under the run's key (securesystemslib);
- its statement parses strictly into in-toto's Statement v1 and passes the bindings'
  own `validate()` (type, subjects with digests, predicate type and predicate);
- its predicate parses strictly into in-toto's TestResult message (an unknown or
  misspelt field is refused: shown on a copy), `result` is one of PASSED, WARNED,
  FAILED, `configuration` is non-empty and each descriptor passes `validate()`;
- its subjects are the report's envelope and the transcript, by SHA-256;
- its test lists are the report's cases by verdict.
With SVR_FILE, the buyer's Verification Summary (SVR v0.2, which the bindings do not
carry) is checked against the predicate's published fields: signed by the buyer's key,
a valid Statement v1 about the report's envelope, `verifier.id` a URI,
`verifier.policies` a list of valid ResourceDescriptors, `timeCreated` an RFC 3339 time,
`properties` a non-empty list of strings.
Exits 0 when all hold.
"""
import base64
import copy
import datetime
import hashlib
import json
import pathlib
import sys
import urllib.parse

from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key
from google.protobuf import json_format
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
from in_toto_attestation.v1 import resource_descriptor_pb2, statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
SVR = "https://in-toto.io/attestation/svr/v0.2"


def sslib_key(pem_path):
    public = load_pem_public_key(pathlib.Path(pem_path).read_bytes())
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    keyval = {"keytype": "ed25519", "keyval": {"public": raw}, "scheme": "ed25519"}
    keyid = hashlib.sha256(json.dumps(keyval, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return SSlibKey(keyid, "ed25519", "ed25519", {"public": raw})


def open_statement(path, key, predicate_type):
    """The statement of a DSSE envelope verified by securesystemslib, validated by in-toto."""
    envelope_dict = json.loads(pathlib.Path(path).read_text())
    accepted = Envelope.from_dict(copy.deepcopy(envelope_dict)).verify([key], 1)
    assert key.keyid in accepted, f"{path}: securesystemslib did not accept key {key.keyid}"
    statement = json.loads(base64.b64decode(envelope_dict["payload"]))
    pb = json_format.ParseDict(statement, statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    assert pb.predicate_type == predicate_type, f"{path}: predicateType {pb.predicate_type}"
    return statement


def valid_descriptor(d):
    ResourceDescriptor.copy_from_pb(json_format.ParseDict(d, resource_descriptor_pb2.ResourceDescriptor())).validate()


def sha256(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


run = pathlib.Path(sys.argv[1])
key = sslib_key(run / "signing-key.pub.pem")
statement = open_statement(run / "test-result.dsse.json", key, TEST_RESULT)
predicate = statement["predicate"]
json_format.ParseDict(predicate, test_result_pb2.TestResult())
assert predicate["result"] in ("PASSED", "WARNED", "FAILED"), predicate["result"]
assert predicate["configuration"], "configuration is required and non-empty"
for d in predicate["configuration"]:
    valid_descriptor(d)
misspelt = dict(predicate, passedTest=predicate.get("passedTests", []))
try:
    json_format.ParseDict(misspelt, test_result_pb2.TestResult())
except json_format.ParseError:
    pass
else:
    sys.exit("in-toto's TestResult accepted a misspelt field: the check has no teeth")
print(f"in-toto-attestation: Statement v1 valid; TestResult parsed strictly, result {predicate['result']}")

subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
expected = {"report.dsse.json": sha256(run / "report.dsse.json"), "transcript.jsonl": sha256(run / "transcript.jsonl")}
assert subjects == expected, f"subjects {subjects}, expected {expected}"
report_envelope = json.loads((run / "report.dsse.json").read_text())
report = json.loads(base64.b64decode(report_envelope["payload"]))["predicate"]
by_verdict = {v: [c["id"] for c in report["cases"] if c["outcome"]["verdict"] == v] for v in ("pass", "fail", "inconclusive")}
assert predicate.get("passedTests", []) == by_verdict["pass"], "passedTests are not the report's passed cases"
assert predicate.get("failedTests", []) == by_verdict["fail"], "failedTests are not the report's failed cases"
assert predicate.get("warnedTests", []) == by_verdict["inconclusive"], "warnedTests are not the inconclusive cases"
print(
    f"test result: subjects are the report's envelope and transcript; "
    f"{len(by_verdict['pass'])} passed, {len(by_verdict['inconclusive'])} warned, {len(by_verdict['fail'])} failed, as the report says"
)

if len(sys.argv) > 2:
    svr_path, buyer = sys.argv[2], sslib_key(sys.argv[3])
    statement = open_statement(svr_path, buyer, SVR)
    assert [s["digest"]["sha256"] for s in statement["subject"]] == [expected["report.dsse.json"]], "SVR subject"
    p = statement["predicate"]
    verifier = p["verifier"]
    assert isinstance(verifier["id"], str) and urllib.parse.urlparse(verifier["id"]).scheme, "verifier.id is a URI"
    assert isinstance(verifier["policies"], list), "verifier.policies is required"
    for d in verifier["policies"]:
        valid_descriptor(d)
    datetime.datetime.fromisoformat(p["timeCreated"].replace("Z", "+00:00"))
    assert p["properties"] and all(isinstance(x, str) for x in p["properties"]), "properties"
    print(f"SVR v0.2: signed by the buyer's key {buyer.keyid[:16]}..., about the report; {len(p['properties'])} properties")
