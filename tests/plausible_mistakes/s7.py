"""Plausible wrong solutions of sheet s7 (exercises/s7.md); the format is in __init__.py."""

MUTATIONS = [
    # A student's (stop 40's trial), which survived: the dead-end rule and the order of the checks.
    (
        "task7_1",
        "a draft that leads to a state allowing nothing kept",
        "if not bool(rows[i + 1].any()):\n            return drafts[:i], rows[: i + 1]",
        "if not bool(rows[i + 1].any()):\n            return drafts[: i + 1], rows[: i + 2]",
    ),
    (
        "task7_1",
        "whether the match ended asked before whether the budget made the next row",
        "if not self.work.ready(req):\n            return drafts[:i], rows[: i + 1]\n"
        "        if g.is_terminated():  # the request ends with this draft: no row after it is read\n"
        "            return drafts[: i + 1], rows[: i + 2]\n",
        "if g.is_terminated():\n            return drafts[: i + 1], rows[: i + 2]\n"
        "        if not self.work.ready(req):\n            return drafts[:i], rows[: i + 1]\n",
    ),
    (
        "task7_1",
        "the grammar never rolled back (the kept drafts stay accepted)",
        "finally:\n    g.rollback(accepted)",
        "finally:\n    pass",
    ),
    (
        "task7_1",
        "rolled back by the number of drafts, not by the number accepted",
        "g.rollback(accepted)",
        "g.rollback(len(drafts))",
    ),
    (
        "task7_1",
        "rolled back only when every draft was allowed, not on an early return",
        "    return drafts, rows\nfinally:\n    g.rollback(accepted)",
        "    g.rollback(accepted)\n    return drafts, rows\nfinally:\n    pass",
    ),
    (
        "task7_1",
        "the next position's row written over the current one",
        "g.fill_vocab_mask(rows, i + 1)",
        "g.fill_vocab_mask(rows, i)",
    ),
    (
        "task7_1",
        "a draft not checked against its row (the grammar is asked to accept a forbidden one)",
        "        if not allows(rows[i], draft):\n            return drafts[:i], rows[: i + 1]\n",
        "",
    ),
    (
        "task7_1",
        "the draft that ends the match dropped",
        "return drafts[: i + 1], rows[: i + 2]",
        "return drafts[:i], rows[: i + 1]",
    ),
    ("task7_1", "drafts after the end of the match kept", "if g.is_terminated():", "if False:"),
    ("task7_2", "no token of the model's own after the drafts", "out.append(picks[len(out)])\n", ""),
    (
        "task7_2",
        "the model's token read from the last row, wherever the drafts stopped",
        "picks[len(out)]",
        "picks[-1]",
    ),
    (
        "task7_2",
        "a disagreeing draft skipped, not the end of the run (the forward never saw the model's token)",
        "break",
        "continue",
    ),
    (
        "task7_2",
        "the model's token read one position early (the last kept draft's row)",
        "picks[len(out)]",
        "picks[max(len(out) - 1, 0)]",
    ),
    (
        "task7_2",
        "the rejected draft kept beside the model's token",
        "        break\n",
        "        out.append(draft)\n        break\n",
    ),
    # A student's (stop 40's trial), which survived: the rejection's token drawn before the uniform.
    (
        "task7_3",
        "the rejection's token drawn before the uniform, at every draft (the right distribution, other tokens)",
        "if p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft:\n        out.append(draft)\n"
        "        continue\n    residual = probs[i].clone()\n    residual[draft] = 0.0\n"
        "    out.append(int(torch.multinomial(residual, 1, generator=generator)))\n    return out\n",
        "residual = probs[i].clone()\n    residual[draft] = 0.0\n"
        "    instead = int(torch.multinomial(residual, 1, generator=generator)) if residual.sum() > 0 else draft\n"
        "    if p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft:\n        out.append(draft)\n"
        "        continue\n    out.append(instead)\n    return out\n",
    ),
    (
        "task7_3",
        "a rejected position sampled from p itself, not from p without the draft",
        "    residual[draft] = 0.0\n",
        "",
    ),
    (
        "task7_3",
        "the draft's probability not divided by its row's sum (the rows are not normalised)",
        "float(probs[i, draft] / probs[i].sum())",
        "float(probs[i, draft])",
    ),
    (
        "task7_3",
        "a rejection goes on to the next draft (the forward never saw the token that replaced it)",
        "    out.append(int(torch.multinomial(residual, 1, generator=generator)))\n    return out\n",
        "    out.append(int(torch.multinomial(residual, 1, generator=generator)))\n    break\n",
    ),
    (
        "task7_3",
        "no token after the last kept draft",
        "out.append(int(torch.multinomial(probs[len(drafts)], 1, generator=generator)))\n",
        "",
    ),
    ("task7_3", "a draft kept when the uniform is above p(d), not below", "< p_draft", "> p_draft"),
    ("task7_3", "a draft the grammar forbids still spends a uniform draw", "if p_draft > 0 and float(", "if float("),
    (
        "task7_1",
        "a draft kept when the budget could not make the row after it (that row left all ones)",
        "if not self.work.ready(req):\n            return drafts[:i], rows[: i + 1]",
        "if not self.work.ready(req):\n            return drafts[: i + 1], rows[: i + 2]",
    ),
    (
        "task7_3",
        "the uniform drawn from the global RNG, not the request's generator (a seed no longer replays)",
        "float(torch.rand((), generator=generator))",
        "float(torch.rand(()))",
    ),
    # Stage s7 worked through as a stranger: mistakes only generated examples caught (the run
    # where every draft is allowed, tied maxima), or nothing did (a 0-d tensor for a token id
    # compares equal to its int; a row filled beyond the budget gives the same answer); 7_3's
    # tensor was caught, but blamed on the mask.
    (
        "task7_1",
        "every draft allowed: the row after the last one dropped",
        "    return drafts, rows\nfinally:",
        "    return drafts, rows[:-1]\nfinally:",
    ),
    (
        "task7_1",
        "every draft allowed: the last draft left out",
        "    return drafts, rows\nfinally:",
        "    return drafts[:-1], rows[:-1]\nfinally:",
    ),
    (
        "task7_1",
        "the loop stops before the last draft",
        "for i, draft in enumerate(drafts):",
        "for i, draft in enumerate(drafts[:-1]):",
    ),
    (
        "task7_1",
        "every draft allowed: the last one not rolled back",
        "    return drafts, rows\nfinally:",
        "    accepted -= 1\n    return drafts, rows\nfinally:",
    ),
    (
        "task7_1",
        "the next row filled before the budget is asked (made anyway, unbounded)",
        "        if not self.work.ready(req):\n            return drafts[:i], rows[: i + 1]\n"
        "        if g.is_terminated():  # the request ends with this draft: no row after it is read\n"
        "            return drafts[: i + 1], rows[: i + 2]\n        g.fill_vocab_mask(rows, i + 1)\n",
        "        g.fill_vocab_mask(rows, i + 1)\n        if not self.work.ready(req):\n"
        "            return drafts[:i], rows[: i + 1]\n        if g.is_terminated():\n"
        "            return drafts[: i + 1], rows[: i + 2]\n",
    ),
    (
        "task7_2",
        "a draft kept when it ties with the row's maximum, not only when it is the argmax",
        "for pick, draft in zip(picks, drafts):\n    if pick != draft:",
        "for i, draft in enumerate(drafts):\n    if logits[i, draft] != logits[i].max():",
    ),
    (
        "task7_2",
        "the model's token returned as a 0-d tensor (equal to its int in a comparison)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = list(logits.argmax(dim=-1))",
    ),
    (
        "task7_1",
        "the kept drafts counted from the loop's index (no drafts: the index is never set)",
        "    return drafts, rows\nfinally:",
        "    return drafts[: i + 1], rows[: i + 2]\nfinally:",
    ),
    (
        "task7_3",
        "the rejected draft zeroed in the caller's row (no copy)",
        "residual = probs[i].clone()",
        "residual = probs[i]",
    ),
    (
        "task7_3",
        "the token after the last draft returned as a tensor, not an int",
        "out.append(int(torch.multinomial(probs[len(drafts)], 1, generator=generator)))",
        "out.append(torch.multinomial(probs[len(drafts)], 1, generator=generator)[0])",
    ),
    (
        "task7_3",
        "a certain draft (p = 1) kept without drawing its uniform",
        "    if p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft:",
        "    if p_draft >= 1.0 or (p_draft > 0 and float(torch.rand((), generator=generator)) < p_draft):",
    ),
    (
        "task7_2",
        "the argmax of a float16 softmax (rounding makes ties)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = torch.softmax(logits.float(), dim=-1).half().argmax(dim=-1).tolist()",
    ),
    # Student 67's wrong solutions of s6-s7 that passed (2026-12-05), each with the test that
    # catches it now.
    (
        "task7_2",
        "the argmax read off a descending sort (not stable: a tie across a wide row goes to a higher id)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = logits.sort(dim=-1, descending=True).indices[:, 0].tolist()",
    ),
    (
        "task7_2",
        "the argmax read off topk(1) (a tie goes to whichever id topk returns, not the lowest)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = logits.topk(1, dim=-1).indices[:, 0].tolist()",
    ),
    (
        "task7_1",
        "accept_token judges the draft (its GrammarError stops the chain), not the row: a draft the row forbids is kept",
        "        if not allows(rows[i], draft):\n            return drafts[:i], rows[: i + 1]\n        g.accept_token(draft)\n",
        "        try:\n            g.accept_token(draft)\n        except GrammarError:\n            return drafts[:i], rows[: i + 1]\n",
    ),
    (
        "task7_1",
        "the caller's drafts cut in place (del drafts[i:]) and returned, not a slice",
        "        if not allows(rows[i], draft):\n            return drafts[:i], rows[: i + 1]\n",
        "        if not allows(rows[i], draft):\n            del drafts[i:]\n            return drafts, rows[: i + 1]\n",
    ),
    (
        "task7_3",
        "the rejection's token drawn with the global generator, not the request's",
        "out.append(int(torch.multinomial(residual, 1, generator=generator)))",
        "out.append(int(torch.multinomial(residual, 1)))",
    ),
    (
        "task7_1",
        "a draft counted before accept_token returned: an accept that raises rolls back one token too many",
        "        g.accept_token(draft)\n        accepted += 1\n",
        "        accepted += 1\n        g.accept_token(draft)\n",
    ),
    (
        "task7_1",
        "a dead end found by the sum of the packed words (words 64 and -64 sum to 0 though 27 bits are set)",
        "if not bool(rows[i + 1].any()):",
        "if int(rows[i + 1].sum()) == 0:",
    ),
    # Stranger 7's wrong solutions that passed (2026-12-06, /work/scratch/stranger7), each with
    # the test that catches it now.
    (
        "task7_1",
        "the chain walks req.grammar, not the charged g (its calls never charged: a slow grammar's drafts kept)",
        "        g.accept_token(draft)\n",
        "        req.grammar.accept_token(draft)\n",
    ),
    (
        "task7_1",
        "the next row filled before asking whether the match ended (a matcher that took EOS refuses it)",
        "        if g.is_terminated():  # the request ends with this draft: no row after it is read\n"
        "            return drafts[: i + 1], rows[: i + 2]\n"
        "        g.fill_vocab_mask(rows, i + 1)\n",
        "        g.fill_vocab_mask(rows, i + 1)\n"
        "        if g.is_terminated():\n"
        "            return drafts[: i + 1], rows[: i + 2]\n",
    ),
    (
        "task7_2",
        "the argmax of a float32 softmax (logits one step apart round to one probability)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = torch.softmax(logits, dim=-1).argmax(dim=-1).tolist()",
    ),
    # (a stranger's mistake, grader honesty round 7: it passed every test of the time)
    (
        "task7_2",
        "the argmax through numpy (no bfloat16, no GPU tensor)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = logits.numpy().argmax(axis=-1).tolist()",
    ),
    # (a third stranger's mistakes, grader honesty round 9)
    (
        "task7_2",
        "the argmax of a float32 copy (float64 logits 1e-12 apart tie)",
        "picks = logits.argmax(dim=-1).tolist()",
        "picks = logits.float().cpu().numpy().argmax(-1).tolist()",
    ),
    (
        "task7_3",
        "a uniform equal to p(d) keeps the draft (u <= p)",
        "float(torch.rand((), generator=generator)) < p_draft",
        "float(torch.rand((), generator=generator)) <= p_draft",
    ),
]
