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
