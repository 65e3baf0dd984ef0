"""What happens to jobs when the service stops without finishing them.

Every accepted job is a row in the store before `POST /plan` answers, so nothing accepted lives
only in memory:

- queued jobs simply stay queued and run when any instance has a free solver;
- on a graceful stop (SIGINT/SIGTERM) running jobs are put back in the queue at once, their
  interrupted attempt not counted;
- after a crash (the server killed, the machine lost) a running job's owner is gone: at startup
  and then every `lease_s / 3` seconds, each instance re-queues running jobs whose owner is a
  dead process on this host, or whose lease expired (the owner stopped heart-beating, wherever
  it ran). A job already interrupted `max_attempts` times is marked failed instead, with the
  reason, so a model that brings the service down cannot do so forever; resubmitting it
  queues it again.

Several instances on one store (PostgreSQL) recover for one another: a job whose instance died
is re-queued by any survivor and solved by whichever claims it first (`Store.recover` and
`Store.claim_next` lock the rows they change, so two survivors never both take it).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable

from service.settings import Settings
from service.store import Recovered, Store

log = logging.getLogger("arenaplan.service")


def owner_is_gone(owner: str | None, me: str) -> bool:
    """True when `owner` (host/pid/nonce) is certainly not running: a dead process on this host.

    A previous incarnation of this very process id (a restarted container is pid 1 again) is
    gone too. Owners on other hosts are judged by their lease alone.
    """
    if owner is None:
        return True
    if owner == me:
        return False
    host, _, rest = owner.partition("/")
    pid_text = rest.partition("/")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def recover_jobs(store: Store, settings: Settings,
                 is_gone: Callable[[str | None], bool]) -> Recovered:
    result = store.recover(is_gone, settings.max_attempts)
    for plan_id in result.requeued:
        log.warning("job %s: the service instance solving it stopped; re-queued", plan_id)
    for plan_id in result.failed:
        log.warning("job %s: interrupted %d times; marked failed", plan_id,
                    settings.max_attempts)
    return result
