"""Another GPU schedule for a block, through the one override: FUSEDATTEND_SCHEDULE=path.json."""

import contextlib
import dataclasses

from fusedattend.gpu import schedule
from fusedattend.tune import schedule_file


@contextlib.contextmanager
def policy_override(**fields):
    """The policy in force (schedule.current_policy) with `fields` replaced, for the block
    (fusedattend.tune.schedule_file: blocks nest; a bad field fails here, naming it)."""
    with schedule_file({**dataclasses.asdict(schedule.current_policy()), **fields}) as policy:
        yield policy
