"""Supervision with several ranks (sfx.engine.supervision.RankAgreement): how a rank ends when another
is gone: a learner that never joins, a stop nobody answers."""


class _Rules:
    def __init__(self):
        self.stop = None

    def started(self, start):
        pass

    def handle(self, reports):
        pass

    def check(self, now):
        return self.stop


class _Queue:
    def __init__(self):
        self.items = []

    def put_many(self, items, *a, **k):
        self.items.extend(items)

    def put(self, item, *a, **k):
        self.items.append(item)


def _agreement(ready, timeout=10.0):
    from types import SimpleNamespace

    from sfx.engine.supervision import RankAgreement, StopRequest

    rules, control = _Rules(), _Queue()
    agreement = RankAgreement(SimpleNamespace(distributed_timeout_sec=timeout), (control,), rules, StopRequest(),
                              learners_ready=lambda: ready)
    agreement.started(1000.0)
    return agreement, rules, control


def test_a_learner_that_never_joins_the_others_ends_the_rank_for_a_restart():
    from sfx.engine.supervision import JOIN_GRACE_SEC

    agreement, _, _ = _agreement(ready=False)
    assert agreement.check(1000.0 + 10.0 + JOIN_GRACE_SEC - 1) is None
    stop = agreement.check(1000.0 + 10.0 + JOIN_GRACE_SEC + 1)
    assert stop.status == "rank_lost" and "did not join the other ranks" in stop.message
    ready, _, _ = _agreement(ready=True)
    assert ready.check(1000.0 + 10.0 + JOIN_GRACE_SEC + 1) is None


def test_a_stop_nobody_answers_is_a_lost_rank_unless_the_user_stopped():
    from sfx.engine.supervision import Stop

    agreement, rules, control = _agreement(ready=True)
    rules.stop = Stop("done")
    assert agreement.check(1001.0) is None and control.items  # the learners are asked to stop first
    assert agreement.check(1005.0) is None
    assert agreement.check(1012.0).status == "rank_lost"
    agreement, rules, _ = _agreement(ready=True)
    rules.stop = Stop("interrupted")
    agreement.check(1001.0)
    assert agreement.check(1012.0).status == "interrupted"


def test_every_rank_ends_with_the_most_urgent_status_any_rank_wanted():
    """The learners' vote keeps the most urgent status (sfx.engine.protocol.STOP_STATUSES): a rank whose rules
    never fired, or said "done", ends "interrupted" when another rank was stopped by Ctrl+C or a warning."""
    from sfx.engine.protocol import RANKS_STOPPED, STOP_LEARNING
    from sfx.engine.supervision import Stop

    def agreed(status):
        return [(RANKS_STOPPED, 0, {"env_steps": 20480, "weights_match": True, "status": status})]

    agreement, _, control = _agreement(ready=True)
    assert agreement.check(1001.0) is None and not control.items
    agreement.handle(agreed("interrupted"))
    stop = agreement.check(1002.0)
    assert (stop.status, stop.reason) == ("interrupted", "another_rank")
    assert stop.message == ("every rank's learner agreed to stop at 20,480 env steps (all ranks) with equal weights, "
                            "as another rank's stop wanted (interrupted)")
    # this rank's episodes reached --stop_at_reward as another rank was interrupted: interrupted (it resumes)
    agreement, rules, control = _agreement(ready=True)
    rules.stop = Stop("done", reason="stop_at_reward")
    assert agreement.check(1001.0) is None and control.items == [(STOP_LEARNING, "done")]
    agreement.handle(agreed("interrupted"))
    stop = agreement.check(1002.0)
    assert (stop.status, stop.reason) == ("interrupted", "another_rank")
    # this rank's own stop, the one agreed: no word about another rank
    agreement, rules, control = _agreement(ready=True)
    rules.stop = Stop("interrupted", reason="signal")
    agreement.check(1001.0)
    assert control.items == [(STOP_LEARNING, "interrupted")]
    agreement.handle(agreed("interrupted"))
    stop = agreement.check(1002.0)
    assert (stop.status, stop.reason) == ("interrupted", "signal") and stop.message.endswith("with equal weights")
    # another rank's "done" (its reward target) ends this rank done too
    agreement, _, _ = _agreement(ready=True)
    agreement.handle(agreed("done"))
    stop = agreement.check(1001.0)
    assert (stop.status, stop.reason) == ("done", "another_rank")
