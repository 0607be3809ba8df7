"""Whether a DVC remote answers, asked before a pull with backoff, so that a remote that is down says so.

DVC's own pull against an S3 endpoint that does not answer spends about 40 s in its client's retries and then
reports only "1 files failed to download". Here the remote is asked first, cheaply (a folder remote: does the
folder exist; an S3 remote: `HeadBucket` with a 5 s timeout and no retries of its own), up to `ATTEMPTS` times
`BACKOFF_S` apart; one that never answers stops the hydration naming the remote and what was tried. Any answer
at all (a missing bucket or object, a refusal) is the pull's to report. Other schemes are left to DVC.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from pathlib import Path

from foundry.runtime.env import s3_endpoint_url

log = logging.getLogger(__name__)

BACKOFF_S = (1.0, 2.0, 4.0, 8.0)  # seconds before the 2nd, 3rd, 4th and 5th ask: 15 s in all
ATTEMPTS = len(BACKOFF_S) + 1


class RemoteUnreachable(RuntimeError):
    """The remote never answered; the message names it and the attempts."""


def wait_for_remote(remote: str, backoff_s: tuple[float, ...] = BACKOFF_S) -> None:
    """Return once `remote` answers; `RemoteUnreachable` after `len(backoff_s) + 1` asks that got no answer."""
    for attempt, delay in enumerate((*backoff_s, None), start=1):
        why = _unanswered(remote)
        if why is None:
            return
        if delay is None:
            raise RemoteUnreachable(
                f"the DVC remote {remote} did not answer {attempt} times over {sum(backoff_s):.0f} s: {why}"
            )
        log.warning("the DVC remote %s did not answer (%s); asking again in %.0f s", remote, why, delay)
        time.sleep(delay)


def _unanswered(remote: str) -> str | None:
    """Why `remote` gave no answer, or None when it answered."""
    parsed = urllib.parse.urlparse(remote)
    if parsed.scheme == "s3":
        return _s3_unanswered(parsed.netloc)
    if parsed.scheme in ("", "file"):
        folder = Path(parsed.path if parsed.scheme else remote)
        return None if folder.is_dir() else f"no folder {folder}"
    return None


def _s3_unanswered(bucket: str) -> str | None:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    config = Config(connect_timeout=5, read_timeout=5, retries={"total_max_attempts": 1})
    client = boto3.client("s3", endpoint_url=s3_endpoint_url(), config=config)
    try:
        client.head_bucket(Bucket=bucket)
    except ClientError:  # an answer: a missing bucket or a refusal is for the pull to report
        return None
    except (ConnectionError, HTTPClientError) as exc:
        return str(exc)
    return None
