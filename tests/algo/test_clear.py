"""CLEAR's cloning terms against a plain loop over samples (Rolnick et al. 2019)."""

import torch

from sfx.algo.clear import clear_cloning_terms
from sfx.algo.distributions import Categorical


def test_cloning_terms_equal_a_loop_over_replayed_valid_samples():
    g = torch.Generator().manual_seed(0)
    B, T, A = 5, 7, 4
    behaviour_logits, current_logits = torch.randn(B, T, A, generator=g), torch.randn(B, T, A, generator=g)
    values, old_values = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    valids = torch.rand(B, T, generator=g) > 0.2
    replayed = torch.tensor([True, False, True, True, False])
    mu = Categorical(behaviour_logits.reshape(B * T, A))
    pi = Categorical(current_logits.reshape(B * T, A))
    kl = mu.kl_divergence(pi).reshape(B, T)
    terms = clear_cloning_terms(kl, values, old_values, valids, replayed)

    kls, sq = [], []
    for b in range(B):
        for t in range(T):
            if not (replayed[b] and valids[b, t]):
                continue
            p = torch.softmax(behaviour_logits[b, t].double(), -1)
            q = torch.softmax(current_logits[b, t].double(), -1)
            kls.append(float(sum(p[a] * (torch.log(p[a]) - torch.log(q[a])) for a in range(A))))
            sq.append(float((values[b, t] - old_values[b, t]) ** 2))
    assert abs(terms.policy_cloning.item() - sum(kls) / len(kls)) < 1e-5
    assert abs(terms.value_cloning.item() - sum(sq) / len(sq)) < 1e-5


def test_fresh_samples_do_not_clone_and_no_replay_gives_zero():
    kl, v, old = torch.ones(2, 3), torch.zeros(2, 3, requires_grad=True), torch.ones(2, 3)
    valids = torch.ones(2, 3, dtype=torch.bool)
    terms = clear_cloning_terms(kl, v, old, valids, torch.tensor([False, False]))
    assert terms.policy_cloning.item() == 0.0 and terms.value_cloning.item() == 0.0
    terms = clear_cloning_terms(kl, v, old, valids, torch.tensor([True, False]))
    terms.value_cloning.backward()
    assert torch.equal(v.grad[1], torch.zeros(3)) and bool((v.grad[0] != 0).all())  # only replayed rows
