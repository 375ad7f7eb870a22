#!/usr/bin/env python3
"""DSSE interoperability with a third-party implementation (securesystemslib).

Usage: verify_dsse.py RUN_DIR TENANTCHECK_BINARY

With the `securesystemslib` package (pip install 'securesystemslib[crypto]') and
Python's `cryptography`, checks that:
- the public key loads from both forms tenantcheck writes (SPKI PEM, and
  securesystemslib's JSON key form), and the private key (PKCS#8 PEM) loads;
- the envelope verifies under the key id securesystemslib derives itself, and the
  statement's subject is the transcript's SHA-256;
- with one byte of the payload changed, securesystemslib rejects the envelope;
- the other way round: an envelope that securesystemslib signs over the same payload
  with the run's private key is accepted by `tenantcheck verify`.
Exits 0 when all hold.
"""
import base64
import copy
import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, SSlibKey

run = pathlib.Path(sys.argv[1])
binary = sys.argv[2]

public = load_pem_public_key((run / "signing-key.pub.pem").read_bytes())
raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
keyval = {"keytype": "ed25519", "keyval": {"public": raw}, "scheme": "ed25519"}
keyid = hashlib.sha256(json.dumps(keyval, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
key = SSlibKey(keyid, "ed25519", "ed25519", {"public": raw})

as_json = json.loads((run / "signing-key.pub.json").read_text())
json_key = SSlibKey.from_dict(as_json.pop("keyid"), as_json)
assert json_key.keyid == keyid and json_key.keyval == key.keyval, "the two public key forms differ"

envelope_dict = json.loads((run / "report.dsse.json").read_text())
envelope = Envelope.from_dict(copy.deepcopy(envelope_dict))
accepted = envelope.verify([key], 1)
assert keyid in accepted, f"securesystemslib did not accept key {keyid}"
statement = json.loads(base64.b64decode(envelope_dict["payload"]))
transcript = hashlib.sha256((run / "transcript.jsonl").read_bytes()).hexdigest()
assert statement["_type"] == "https://in-toto.io/Statement/v1"
assert statement["subject"][0]["digest"]["sha256"] == transcript, "subject is not the transcript"
print(f"securesystemslib: envelope verified with key {keyid}; subject is the transcript")

payload = bytearray(base64.b64decode(envelope_dict["payload"]))
payload[len(payload) // 2] ^= 0x20
tampered = dict(envelope_dict, payload=base64.b64encode(bytes(payload)).decode())
try:
    Envelope.from_dict(tampered).verify([key], 1)
except Exception as e:  # securesystemslib raises VerificationError
    print(f"securesystemslib: one changed payload byte is rejected ({type(e).__name__})")
else:
    sys.exit("securesystemslib accepted a tampered envelope")

private = load_pem_private_key((run / "signing-key.pem").read_bytes(), password=None)
theirs = Envelope(payload=base64.b64decode(envelope_dict["payload"]), payload_type=envelope_dict["payloadType"], signatures={})
theirs.sign(CryptoSigner(private, key))
with tempfile.TemporaryDirectory() as d:
    path = pathlib.Path(d) / "report.dsse.json"
    path.write_text(json.dumps(theirs.to_dict()))
    result = subprocess.run(
        [binary, "verify", str(path), "--key", str(run / "signing-key.pub.pem"), "--transcript", str(run / "transcript.jsonl")],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        sys.exit(f"tenantcheck verify rejected securesystemslib's envelope:\n{result.stdout}{result.stderr}")
print("tenantcheck verify: accepts the envelope securesystemslib signed")
