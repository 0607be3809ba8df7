"""Vendor tokens known by their prefix, and the key names that mark a secret value, for `pii_patterns`.

A prefix with a fixed-shape tail is a token wherever it stands (code, JSON, prose, a URL): nothing else
looks like `sk-proj-` followed by 40 random characters. The table is the vendors' documented formats.
"""

from __future__ import annotations

import re

_VENDORS = (
    r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}",  # OpenAI project, service-account and admin keys
    r"sk-ant-[a-z]{2,8}\d\d-[A-Za-z0-9_-]{20,}",  # Anthropic (api03, admin01, ...)
    r"sk-[A-Za-z0-9]{32,}",  # OpenAI legacy keys (T3BlbkFJ inside) and compatible APIs
    r"sk\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}",  # Mapbox secret token
    r"hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,}",  # Hugging Face user and organisation tokens
    r"npm_[A-Za-z0-9]{36}",  # npm
    r"pypi-AgE[A-Za-z0-9_-]{50,}",  # PyPI and TestPyPI (macaroons)
    r"SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,50}",  # SendGrid
    r"GOCSPX-[A-Za-z0-9_-]{24,32}|ya29\.[A-Za-z0-9_-]{30,}|1//0[A-Za-z0-9_-]{40,}",  # Google OAuth
    r"key-(?=[0-9a-z]{0,31}\d)[0-9a-z]{32}|[0-9a-f]{32}-us\d{1,2}|xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}",  # Mailgun, ...
    r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",  # Shopify
    r"do[opr]_v1_[a-f0-9]{64}|dapi[a-f0-9]{32}(?:-\d)?|sbp_[a-f0-9]{40}",  # DigitalOcean, Databricks, Supabase
    r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}|hv[sbr]\.[A-Za-z0-9_-]{24,}",  # Postman, HashiCorp Vault
    r"lin_api_[A-Za-z0-9]{40}|ATATT3[A-Za-z0-9_=-]{50,}|ATBB[A-Za-z0-9]{32}",  # Linear, Atlassian, Bitbucket
    r"gl(?:sa|c)_[A-Za-z0-9_+/=]{32,}",  # Grafana service-account and cloud tokens
    r"AGE-SECRET-KEY-1[0-9A-Z]{58}",  # age
    r"sq0(?:atp|csp)-[A-Za-z0-9_-]{22,43}|EAAA[A-Za-z0-9_-]{60,}",  # Square
    r"\d{8,10}:AA[A-Za-z0-9_-]{33}",  # Telegram bot
    r"sl\.[A-Za-z0-9_-]{130,}|HRKU-[A-Za-z0-9_-]{60}",  # Dropbox, Heroku
    r"r8_[A-Za-z0-9]{37}|gsk_[A-Za-z0-9]{52}|xai-[A-Za-z0-9]{70,}|pplx-[A-Za-z0-9]{40,}",  # Replicate, Groq, xAI, ...
    r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}|pcsk_[A-Za-z0-9_]{50,}",  # LangSmith, Pinecone
    r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}|sntr(?:ys|yu)_[A-Za-z0-9+/=_]{40,}",  # Doppler, Sentry
    r"NRAK-[A-Z0-9]{27}|tskey-[a-z]+-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}",  # New Relic, Tailscale
    r"figd_[A-Za-z0-9_-]{40,}|ntn_[A-Za-z0-9]{40,}|secret_[A-Za-z0-9]{43}",  # Figma, Notion
    r"dckr_pat_[A-Za-z0-9_-]{27,}|oy2[a-z0-9]{43}|rubygems_[a-f0-9]{48}",  # Docker Hub, NuGet, RubyGems
    r"[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}",  # Azure AD (Entra) client secret
)
API_TOKEN = re.compile(r"(?<![\w-])(?:" + "|".join(_VENDORS) + r")(?![\w-])")
# One of these is in every token the table matches: a cheap test before the expression.
API_TOKEN_MARKERS = ("sk-", "sk.eyJ", "hf_", "api_org_", "npm_", "pypi-", "SG.", "GOCSPX-", "ya29.", "1//0", "key-")
API_TOKEN_MARKERS += ("-us", "xkeysib-", "shp", "_v1_", "dapi", "sbp_", "PMAK-", "hvs.", "hvb.", "hvr.", "lin_api_")
API_TOKEN_MARKERS += ("ATATT3", "ATBB", "glsa_", "glc_", "AGE-SECRET-KEY-", "sq0", "EAAA", ":AA", "sl.", "HRKU-")
API_TOKEN_MARKERS += ("r8_", "gsk_", "xai-", "pplx-", "lsv2_", "pcsk_", "dp.", "sntry", "NRAK-", "tskey-", "figd_")
API_TOKEN_MARKERS += ("ntn_", "secret_", "dckr_pat_", "oy2", "rubygems_", "Q~")
# The start of a token of a known prefix, any kind: a line ending in a word that holds one may be a token wrapped.
WRAP_MARKERS = ("AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "xapp-")
WRAP_MARKERS += ("k_live_", "k_test_", "whsec_", "AIza", "eyJ", "sk-", "hf_", "SG.", "r8_", "sq0", "shp")
WRAP_MARKERS += tuple(m for m in API_TOKEN_MARKERS if len(m) > 3)

# The names of secrets. `token`, `auth`, `pass` and `pwd` (and names ending in them) are weak: their
# value must look random too (pii_checks.looks_random), so `token = self._next()` stays.
SECRET_NAME = (
    r"(?i:passw(?:or)?d|passphrase|(?:client[_-]?)?secret(?:[_-]?(?:access[_-]?)?key)?|api[_-]?(?:key|secret)|apikey"
    r"|private[_-]?key(?:[_-]?id)?|(?:master|encryption|signing)[_-]?key|client[_-]?key[_-]?data|credentials?"
    r"|token|a(?<![a-z]a)uth|p(?<![a-z]p)(?:ass|wd))"
)
# Every name SECRET_NAME matches holds one of these (lowercased): one scan each, 10x cheaper than the expression.
SECRET_WORDS = ("pass", "pwd", "secret", "api", "token", "auth", "credential", "private", "master", "encryption")
SECRET_WORDS += ("signing", "client")
