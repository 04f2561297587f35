"""Another GPU schedule for a block, through the one override: FUSEDATTEND_SCHEDULE=path.json."""

import contextlib
import dataclasses
import json
import os
import tempfile

from fusedattend.gpu import schedule


@contextlib.contextmanager
def policy_override(**fields):
    """The policy in force (schedule.current_policy) with `fields` replaced, for the block: a
    fresh JSON file that FUSEDATTEND_SCHEDULE names (a new path, so a new Policy, new Schedules
    and new replays: each is keyed by it). Blocks nest; a bad field fails here, naming it."""
    values = {**dataclasses.asdict(schedule.current_policy()), **fields}
    fd, path = tempfile.mkstemp(prefix="fusedattend-schedule-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    saved = os.environ.get(schedule.SCHEDULE_ENV)
    os.environ[schedule.SCHEDULE_ENV] = path
    try:
        schedule.current_policy()
        yield schedule.current_policy()
    finally:
        if saved is None:
            os.environ.pop(schedule.SCHEDULE_ENV, None)
        else:
            os.environ[schedule.SCHEDULE_ENV] = saved
        os.unlink(path)
