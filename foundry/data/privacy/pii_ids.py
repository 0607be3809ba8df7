"""`pii_patterns`' national numbers and dates of birth: US SSNs and ITINs (dashed or spaced; nine digits only after "SSN"),
UK National Insurance numbers, and three known only by the word beside them: Canadian Social Insurance
Numbers (Luhn), Indian Aadhaar numbers (Verhoeff) and passport numbers (US: nine digits, or a letter and
eight).

Nine or twelve digits alone are far more often a constant, a count or a timestamp than a person, so those
are replaced only after their name (`SIN: 046 454 286`, `"aadhaar": "2345 6789 0124"`, `passport no.
123456789`) and, where the number has one, when its check digit agrees. A date is a date of birth only after
the words that say so (`born on 12 March 1985`, `date of birth: 1985-03-12`, `DOB 03/12/1985`), and only
when it is a calendar date; a year alone is left.
"""

from __future__ import annotations

import datetime
import re

from foundry.data.privacy.pii_checks import luhn_ok, nino_ok, ssn_ok

# A name, then up to five characters of punctuation (`": "`, ` = '`), or a short verb (`SIN is 046...`).
_THEN = r"[^\w\n]{1,5}(?:(?:is|was|number|no\.?|#)[^\w\n]{1,5})?"
NATIONAL_IDS = (
    re.compile(r"\d(?<![\w.+-]\d)\d\d(?P<sep>[- ])\d\d(?P=sep)\d{4}(?![\w-]|\.\d)"),
    re.compile(r"(?i:ssn|social security(?: number| no\.?)?)\W{1,5}(?P<span>\d{9})(?!\w)"),
    re.compile(r"[A-Za-z](?<![\w.-][A-Za-z])[A-Za-z] ?\d\d ?\d\d ?\d\d ?[A-Da-d](?!\w)"),
    re.compile(
        r"(?i:s(?<![\w.]s)in|social[ _-]?insurance(?:[ _-]?(?:number|no\.?))?)"
        + _THEN
        + r"(?P<span>\d{3}(?P<sep>[ -]?)\d{3}(?P=sep)\d{3})(?![\w-])"
    ),
    re.compile(
        r"(?i:a(?<![\w.]a)adhaa?r(?:[ _-]?(?:number|no\.?|card))?)"
        + _THEN
        + r"(?P<span>[2-9]\d{3}(?P<sep>[ -]?)\d{4}(?P=sep)\d{4})(?![\w-])"
    ),
    re.compile(
        r"(?i:p(?<![\w.]p)assport(?:[ _-]?(?:number|no\.?|num))?)" + _THEN + r"(?P<span>[A-Z]?\d{8,9})(?![\w-])"
    ),
)
# Words every match of the expressions above starts with (lowercased).
ID_ANCHORS = {NATIONAL_IDS[1]: ("ssn", "social"), NATIONAL_IDS[3]: ("sin", "social"), NATIONAL_IDS[4]: ("aadha",)}
ID_ANCHORS[NATIONAL_IDS[5]] = ("passport",)

# Verhoeff's dihedral-group tables: multiplication and the position permutation.
_D = [[int(ch) for ch in row] for row in "0123456789 1234067895 2340178956 3401289567 4012395678 5987604321 "
      "6598710432 7659821043 8765932104 9876543210".split()]  # fmt: skip
_P = [[int(ch) for ch in row] for row in "0123456789 1576283094 5803796142 8916043527 9453126870 4286573901 "
      "2793806415 7046913258".split()]  # fmt: skip


def verhoeff_ok(digits: str) -> bool:
    check = 0
    for i, ch in enumerate(reversed(digits)):
        check = _D[check][_P[i % 8][int(ch)]]
    return check == 0


def national_id_ok(value: str, match: re.Match) -> bool:
    """The SSN and NINO rules; the check digit of a SIN (Luhn; none starts 0 or 8) or an Aadhaar number
    (Verhoeff); a passport number is not all one digit."""
    digits = re.sub(r"\D", "", value)
    if match.re is NATIONAL_IDS[3]:
        return digits[0] not in "08" and luhn_ok(digits)
    if match.re is NATIONAL_IDS[4]:
        return verhoeff_ok(digits)
    if match.re is NATIONAL_IDS[5]:
        return len(set(digits)) > 1
    return nino_ok(value) if value[0].isalpha() else ssn_ok(value)


_MONTH = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|"
    r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
_DATE = (
    r"(?P<span>\d{4}-\d{1,2}-\d{1,2}|\d{1,2}(?P<sep>[./-])\d{1,2}(?P=sep)(?:\d{4}|\d{2})"
    r"|\d{1,2}(?:st|nd|rd|th)?[ ](?:of[ ])?" + _MONTH + r",?[ ]\d{4}"
    r"|" + _MONTH + r"[ ]\d{1,2}(?:st|nd|rd|th)?,?[ ]\d{4})(?![\w/-]|\.\d)"
)
# The words, then up to five characters of punctuation, or a short verb or preposition (`born on`, `is`).
BIRTH_DATE = re.compile(
    r"(?i:b(?<![\w.]b)orn|date[ _-]?of[ _-]?birth|birth[ _-]?date|birthday|d(?<![\w.]d)\.?o\.?b\.?)"
    r"[^\w\n]{0,5}(?:(?:is|was|on|in)[^\w\n]{1,5})?" + _DATE
)
BIRTH_ANCHORS = ("born", "date", "birth", "dob", "d.o.b")
_MONTHS = "jan feb mar apr may jun jul aug sep oct nov dec".split()


def birth_date_ok(value: str) -> bool:
    """A day of the calendar from 1900 to 2100: the month by its name, or by either number where day and
    month could be either way round; a two-digit year as 19xx or 20xx."""
    numbers = [int(n) for n in re.findall(r"\d+", value)]
    named = next((i + 1 for i, m in enumerate(_MONTHS) if m in value.lower()), None)
    if named is not None:
        return _a_day(numbers[-1], named, numbers[0])
    if len(str(numbers[0])) == 4:  # year-month-day
        return _a_day(*numbers)
    first, second, year = numbers
    years = [year] if year >= 100 else [1900 + year, 2000 + year]
    return any(_a_day(y, second, first) or _a_day(y, first, second) for y in years)


def _a_day(year: int, month: int, day: int) -> bool:
    if not 1900 <= year <= 2100:
        return False
    try:
        datetime.date(year, month, day)
    except ValueError:
        return False
    return True
