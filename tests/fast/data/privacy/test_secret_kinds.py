"""Each kind of secret and personal data, in prose, code (Python, JS, shell), JSON and YAML: the scrubber
(foundry.data.privacy.pii) replaces the value, the gate's independent second detector (foundry.data.privacy.secret_scan)
flags it, and what the scrubber leaves passes the second detector. Ordinary code stays untouched by both.

Decided here: hex digests (sha256 in lock files), UUIDs, version strings and OIDs are not secrets, unless
a secret's name stands beside them (`token: <uuid>` is a token).
"""

from __future__ import annotations

import pytest
from helpers_secrets import CASES, OPENAI, SPLIT

from foundry.data.privacy import pii, secret_scan


@pytest.mark.parametrize("kind, value, text", CASES + SPLIT)
def test_the_scrubber_replaces_it(kind, value, text):
    scrubbed, counts = pii.scrub(text)
    assert value not in scrubbed and counts[kind] >= 1, (scrubbed, counts)


@pytest.mark.parametrize("kind, value, text", CASES + SPLIT)
def test_the_second_detector_flags_it(kind, value, text):
    assert secret_scan.kinds(text), text


@pytest.mark.parametrize("kind, value, text", CASES + SPLIT)
def test_what_the_scrubber_leaves_passes_both_detectors(kind, value, text):
    scrubbed, _ = pii.scrub(text)
    assert list(pii.find(scrubbed)) == [] and secret_scan.kinds(scrubbed) == set(), scrubbed


NEGATIVES = [
    "token = self._next()\n",
    "token = tokens[0]\n    if token == 'NAME':\n",
    'password_field = "password"\n',
    "pwd = os.getcwd()\n",
    "auth = None\nauth = request.headers.get('Authorization')\n",
    "authorization = base64.decodebytes(authorization).decode('ascii')\n",
    "def get_token(self, refresh=False):\n    return self._token\n",
    "SERVER_AUTH = '1.3.6.1.5.5.7.3.1'\n",
    '__version__ = "3.11.7"\nversion: 2.31.0\n',
    'request_id = "123e4567-e89b-12d3-a456-426614174000"\n',
    'sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"\n',
    '"integrity": "sha512-' + "q" * 86 + '=="\n',
    'headers = {"Authorization": f"Bearer {token}"}\n',
    'curl -H "Authorization: Bearer $TOKEN" https://api.example.com\n',
    "DATABASE_URL=postgres://app:${DB_PASSWORD}@localhost/app\n",
    'url = f"{scheme}://{user}:{password}@{host}/"\n',
    "https://example.com/search?page=2&sort=desc&key=%s\n",
    'parser.add_argument("--password", metavar="PASSWORD", help="the password")\n',
    "Set default password for encrypted files; generate a new password for you.\n",
    "sig = inspect.signature(func)\n_DD_SIGNATURE = 0x08074b50\n",
    "at 12:30:45 on 2023-01-15, build 1234.5678.9012\n",
    "Decimal('+35236450.6') and 1e+12345678\n",
    "'sd_IN@devanagari.UTF-8', 'en_SG.ISO8859-1'\n",
    "from huggingface_hub import hf_hub_download\nnpm_config_cache = '/tmp/npm'\n",
    "Basic interface for SAX error handlers. Bearer tokens expire.\n",
    'password = "<SECRET>"\nurl = "https://app:<URL_CREDENTIALS>@db"\n',
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_ordinary_code_is_left_alone(text):
    assert pii.scrub(text)[0] == text and secret_scan.kinds(text) == set()


def test_the_second_detector_shares_no_code_with_the_scrubber():
    """Independence: a mistake in one set of detectors is not copied into the other."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(secret_scan))  # its number checks included: they are its own
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not any(name.startswith("foundry") for name in imported), imported


def test_a_split_key_is_replaced_with_its_join():
    scrubbed, counts = pii.scrub(f'key = ("{OPENAI[:20]}"\n       "{OPENAI[20:]}")\n')
    assert scrubbed == 'key = ("<API_TOKEN>")\n' and counts == {"api_token": 1}
