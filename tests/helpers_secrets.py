"""Secrets and personal data (#30 point 3: tests/fast/data/privacy/test_secret_kinds.py, tests/fast/test_security_review.py)."""

from __future__ import annotations

import base64
import urllib.parse

# Test data only, assembled from parts in the providers' documented shapes; none is a real credential.
RAND = "Ab3De6Gh9Jk2Lm5No8Pq1Rs4Tu7Vw0Xy"  # 32 mixed characters
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_SESSION = "IQoJb3JpZ2luX2VjE" + RAND * 4
AZURE_KEY = base64.b64encode(bytes(range(7, 71))).decode()  # 88 characters ending "=="
SAS_SIG = urllib.parse.quote(base64.b64encode(bytes(range(90, 122))).decode(), safe="")
OPENAI = "sk-" + "proj-" + RAND + "T3BlbkFJ" + RAND[:20]
ANTHROPIC = "sk-" + "ant-api03-" + RAND * 2 + "_x-" + RAND[:20] + "AA"
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
NPM = "npm_" + RAND + "Zz99"
PYPI = "pypi-" + "AgEIcHlwaS5vcmc" + RAND * 2
SENDGRID = "SG." + RAND[:22] + "." + RAND + "Kk7Mm1Nn3Pp"
GOOGLE_OAUTH = "GOCSPX-" + RAND[:28]
JWT_HEADER = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
BASIC = base64.b64encode(b"alice:Tr0ub4dor&3").decode()
PEM_BODY = "MIIEowIBAAKCAQEA" + RAND
KEY_BLOCK = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
KEY_DATA = base64.b64encode(KEY_BLOCK.encode()).decode()
KEY_IN_JSON = KEY_BLOCK.replace("\n", "\\n")  # as a service-account file holds it

VENDOR_TOKENS = [OPENAI, ANTHROPIC, HF, NPM, PYPI, SENDGRID, GOOGLE_OAUTH]


def contexts(value: str) -> list[str]:
    """The value standing alone, in code, JSON and YAML, under a neutral name."""
    return [
        f"the key {value} was leaked",
        f'client = Client("{value}")\n',
        f"const client = new Client('{value}');\n",
        f'curl -s https://api.example.com --data "{value}"\n',
        f'{{"client": {{"value": "{value}"}}}}',
        f"client:\n  value: {value}\n",
    ]


# (kind, the secret or personal value, a text holding it)
CASES = [(kind, token, text) for token in VENDOR_TOKENS for text in contexts(token) for kind in ["api_token"]]
CASES += [
    ("aws_secret_key", AWS_SECRET, f'{{"Credentials": {{"SecretAccessKey": "{AWS_SECRET}", "Expiration": "x"}}}}'),
    ("aws_secret_key", AWS_SESSION, f'{{"Credentials": {{"SessionToken": "{AWS_SESSION}"}}}}'),
    ("aws_secret_key", AWS_SECRET, f"[default]\naws_secret_access_key = {AWS_SECRET}\n"),
    ("aws_secret_key", AWS_SESSION, f"export AWS_SESSION_TOKEN={AWS_SESSION}\n"),
    ("aws_secret_key", AWS_SECRET, f"aws configure set aws_secret_access_key {AWS_SECRET}\n"),
    (
        "azure_key",
        AZURE_KEY,
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={AZURE_KEY};EndpointSuffix=x",
    ),
    ("azure_key", AZURE_KEY, f'conn = "Endpoint=sb://acme/;SharedAccessKeyName=root;SharedAccessKey={AZURE_KEY}"'),
    ("url_credentials", SAS_SIG, f"https://acme.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&sig={SAS_SIG}"),
    ("url_credentials", "Hunter2Pass", "DATABASE_URL=postgres://app:Hunter2Pass@10.0.0.5:5432/app\n"),
    ("url_credentials", "s3cr3tPw", 'redis = Redis.from_url("redis://:s3cr3tPw@localhost:6379/0")\n'),
    ("url_credentials", "pa55w0rd", '{"url": "https://alice:pa55w0rd@192.168.1.10/api"}'),
    ("url_credentials", "ya" + RAND, f"GET https://api.example.com/v1/me?access_token=ya{RAND}&fields=id"),
    ("url_credentials", RAND, f'fetch("https://api.example.com/items?page=2&token={RAND}")'),
    ("secret_assignment", "hunter22", "DB_PASS=hunter22\n"),
    ("secret_assignment", RAND, f"PGPASSWORD={RAND} psql -h db app\n"),
    ("secret_assignment", RAND, f"$env:GITHUB_TOKEN = '{RAND}'\n"),
    ("secret_assignment", "Tr0ub4dor&3", "Server=db;Database=app;User Id=sa;Pwd=Tr0ub4dor&3;\n"),
    ("secret_assignment", RAND, f'token = "{RAND}"\n'),
    ("secret_assignment", RAND, f"const token = '{RAND}';\n"),
    ("secret_assignment", RAND, f"kind: Config\nusers:\n- name: ci\n  user:\n    token: {RAND}\n"),
    ("secret_assignment", BASIC, f'{{"auths": {{"registry.example.com": {{"auth": "{BASIC}"}}}}}}'),
    ("secret_assignment", "s3cretPw9", "machine api.example.com\n  login alice\n  password s3cretPw9\n"),
    ("secret_assignment", "s3cretPw9", "machine api.example.com login alice password s3cretPw9\n"),
    ("secret_assignment", "Tr0ub4dor&3", "mysql --user root --password Tr0ub4dor&3 app\n"),
    ("auth_header", RAND, f"Authorization: Bearer {RAND}\n"),
    ("auth_header", BASIC, f'curl -H "Authorization: Basic {BASIC}" https://api.example.com\n'),
    ("auth_header", RAND, f'headers = {{"Authorization": "Bearer {RAND}"}}\n'),
    ("auth_header", RAND, f"fetch(url, {{headers: {{'X-API-Key': '{RAND}'}}}})\n"),
    ("private_key", PEM_BODY, f'{{"type": "service_account", "private_key": "{KEY_IN_JSON}"}}'),
    ("private_key", KEY_DATA, f"users:\n- name: ci\n  user:\n    client-key-data: {KEY_DATA}\n"),
    ("national_id", "123-45-6789", "Applicant SSN: 123-45-6789, born 1980."),
    ("national_id", "123456789", '{"ssn": "123456789"}'),
    ("national_id", "AB123456C", "National Insurance number AB123456C on file"),
    ("national_id", "AB 12 34 56 C", "nino: AB 12 34 56 C\n"),
    ("phone", "+447946095800", '{"phone": "+447946095800"}'),
    ("phone", "+14155550123", "call +14155550123 today"),
    ("iban", "gb82west12345698765432", "iban = 'gb82west12345698765432'\n"),
    ("iban", "de89 3704 0044 0532 0130 00", "pay to de89 3704 0044 0532 0130 00 please"),
    ("credit_card", "4111.1111.1111.1111", "card: 4111.1111.1111.1111\n"),
    ("credit_card", "5500/0000/0000/0004", "paid with 5500/0000/0000/0004 today"),
    ("email", "jane.doe@example.org", '{"email": "jane.doe@example.org"}'),
    ("birth_date", "12 March 1985", "Jane Doe, born 12 March 1985, joined in 2010."),
    ("birth_date", "1985-03-12", '{"name": "Jane Doe", "date_of_birth": "1985-03-12"}'),
    ("birth_date", "03/12/1985", "patient:\n  dob: 03/12/1985\n"),
    ("private_ipv4", "10.20.30.41", "The build farm talks to the cache at 10.20.30.41 over NFS."),
    ("private_ipv4", "192.168.77.12", 'client = Client(host="192.168.77.12", port=5432)\n'),
    ("private_ipv4", "172.20.3.4", '{"upstream": {"address": "172.20.3.4"}}'),
    ("private_ipv4", "203.0.113.57", "database:\n  host: 203.0.113.57\n"),
]
# Keys split across lines: string concatenation in Python and JS, a shell line continuation.
SPLIT = [
    ("api_token", OPENAI, f'key = ("{OPENAI[:20]}"\n       "{OPENAI[20:]}")\n'),
    ("api_token", HF, f"const key = '{HF[:12]}' +\n  '{HF[12:]}';\n"),
    ("api_token", NPM, f"export NPM_TOKEN={NPM[:18]}\\\n{NPM[18:]}\n"),
]
