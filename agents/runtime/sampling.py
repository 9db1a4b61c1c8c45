"""A model-written block: its candidates sampled (in rounds while the best is weak),
ranked, and stored as siblings, the chosen one on the path; the sampling reported to the
listener as it goes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from agents import blocks, forms, prompting, ranking
from agents.events import BlockSampled, RuntimeEvent, SamplingProgress
from agents.grammar import block_grammar
from agents.runtime.context import Truncated, earlier_texts
from agents.runtime.control import Control, SessionState
from agents.runtime.recording import Recorder
from storage import Author, NewNode, Node, NodeStatus

#: A block whose candidates all repeat earlier blocks gets one more round in which no
#: run of this many tokens of its context may be generated again (with 8, Gemma said the
#: task back reflowed, a word changed every few: still a copy).
NO_REPEAT_TOKENS = 4
#: A block whose candidates all repeat earlier blocks, where no such round can be had (a
#: chat model, whose reply must repeat the names it is given, or a backend without it),
#: gets one more round at this temperature at least: at 0.3 the coder wrote its failed
#: solution again, word for word, try after try ("no file changed").
HOT_TEMPERATURE = 0.8
#: Seconds between two `SamplingProgress` events of one block (the first piece goes at once).
STREAM_EVERY = 0.5
#: A block the token limit cut after more line breaks than this, with nothing between,
#: was padding a finished block (Python leaves two blank lines at most between statements).
PADDING_LINES = 3
#: The most characters of the streaming candidate a `SamplingProgress` event carries.
STREAM_TEXT_CHARS = 400


class Sampler:
    """Writes the model's blocks: candidates sampled, ranked and stored."""

    def __init__(self, state: SessionState, control: Control, recorder: Recorder) -> None:
        self.state = state
        self.control = control
        self.recorder = recorder

    def generate(
        self, kind: str, tick: int, *, block_tokens: int | None = None
    ) -> tuple[Node, list[Node]]:
        """Sample candidates for a model-written block, rank them, store them all as
        siblings; the chosen one joins the path. Returns (chosen, alternates).
        `block_tokens`: the room for this block where not the options' (a retry after the
        limit cut the last try's file)."""
        self.control.await_step("block", kind)
        self.control.checkpoint()
        header = self.recorder.header(kind, tick)
        question = blocks.QUESTIONS[kind]
        prompter = self.state.prompter
        form = self.state.options.form
        room = block_tokens or self.state.options.block_tokens
        # the longest prompt built on this context: the header, a whole block, a question
        asked = ranking.question_prompt(header.text(), "", question) + prompter.overhead
        try:
            context, collapsed = self.state.window.fit(self.state.path, asked, room)
        except Truncated:
            if room == self.state.options.block_tokens:
                raise
            # more room than the context has left: the options' room, as before
            room = self.state.options.block_tokens
            context, collapsed = self.state.window.fit(self.state.path, asked, room)
        prefix = context + header.text()
        prompt = prompter.block(context, header.text(), kind, self.state.path, collapsed)
        max_tokens = prompter.max_tokens(kind, room)
        earlier = earlier_texts(self.state.path, kind, form)
        if prompter.style == prompting.CHAT:  # saying the ask back is a copy too
            earlier += prompting.asks(form)
        features = self.state.backend.features
        grammar = block_grammar(kind, room) if self.state.options.constrain else None
        if "grammar" not in features or (form == forms.SCRIPT and kind in forms.SCRIPT_KINDS):
            grammar = None
        sampled: list[tuple[Any, int]] = []
        scored: list[ranking.Scored] = []
        rounds = [self.state.options.candidates, *self.state.options.escalation]
        no_repeat_round = -1  # the round that banned repeats, if one did
        temperatures = [self.state.options.temperature] * len(rounds)

        def draw(round_no: int, no_repeat: int = 0) -> None:
            stream = SampleStream(
                self.state.emit, self.state.session_id, kind, tick, rounds[round_no]
            )
            candidates = self.state.backend.generate(
                prompt,
                n=rounds[round_no],
                max_tokens=max_tokens,
                stop=prompter.stop(kind),
                temperature=temperatures[round_no],
                seed=None
                if self.state.options.seed is None
                else self.state.options.seed + len(self.state.path),
                grammar=grammar,
                on_token=stream.piece if "stream" in features else None,
                no_repeat=no_repeat,
                # the "greedy" pick's candidate: the first of the first round
                greedy_first=round_no == 0 and self.state.options.pick == "greedy",
            )
            stream.done(candidates)
            self.state.tokens += sum(len(c.token_ids) for c in candidates)
            bodies = [prompter.body(kind, c.text) for c in candidates]
            # Scored as at most `block_tokens` tokens, the room `fit` left for a block:
            # bytes that are no UTF-8 come back as replacement characters, which can take
            # more tokens than were sampled. The stored block is whole.
            shown = [blocks.head_within(b, room, self.state.window.tokens_in) for b in bodies]
            prompts = [
                prompter.question(prefix, s, question, kind, self.state.path, collapsed)
                for s in shown
            ]
            log_odds = self.state.backend.score_yes_no(prompts)
            cut = [cut_by_limit(c.text, c.finish_reason) for c in candidates]
            scored.extend(ranking.score_candidates(kind, bodies, log_odds, earlier, form, cut))
            sampled.extend((c, round_no) for c in candidates)

        for round_no in range(len(rounds)):
            if round_no:
                self.control.checkpoint()
            draw(round_no)
            if ranking.good_enough(kind, scored, self.state.options.rank_threshold):
                break
        else:
            if all(s.copy for s in scored):
                # every candidate repeated an earlier block: one more round in which the
                # model may not repeat a run of the context's tokens (a document's model
                # only: a chat model's reply must repeat the names the task and the files
                # use, and banned from them the coder misspells them, "hasClose_elements"),
                # else one drawn hotter
                rounds.append(self.state.options.candidates)
                temperatures.append(max(self.state.options.temperature, HOT_TEMPERATURE))
                self.control.checkpoint()
                if "no-repeat" in features and prompter.style == prompting.DOCUMENT:
                    no_repeat_round = len(rounds) - 1
                    temperatures[-1] = self.state.options.temperature
                    draw(no_repeat_round, NO_REPEAT_TOKENS)
                else:
                    draw(len(rounds) - 1)
        best = ranking.pick(scored, self.state.options.pick, self.state.rng)

        def greedy_row(i: int) -> bool:
            return i == 0 and self.state.options.pick == "greedy"

        digest = blocks.prompt_hash(prefix)
        exact = prompter.style == prompting.DOCUMENT
        parent = self.state.path[-1]
        new_nodes = []
        for i, ((candidate, round_no), score) in enumerate(zip(sampled, scored, strict=True)):
            meta: dict[str, Any] = {**header.meta(), "q": question, "collapsed": collapsed}
            meta.update(prompter.meta())
            if score.copy:  # chosen only when every candidate of every round was one
                meta["copy"] = True
            title = forms.title(kind, form, score.body)
            if title:
                meta["title"] = title
            new_nodes.append(
                NewNode(
                    kind=kind,
                    text=score.body,
                    tick=tick,
                    parent_id=parent.id,
                    author=Author.MODEL,
                    status=NodeStatus.CHOSEN if i == best else NodeStatus.ALTERNATE,
                    score=score.score,
                    score_parts=score.parts,
                    # the sampled tokens continue the document; a chat reply's continue
                    # the chat prompt (training tokenizes its body instead)
                    token_ids=candidate.token_ids if exact else None,
                    logprobs=candidate.logprobs if exact else None,
                    sampling={
                        "temperature": 0.0 if greedy_row(i) else temperatures[round_no],
                        "max_tokens": max_tokens,
                        "n": rounds[round_no],
                        "round": round_no,
                        **({"no_repeat": NO_REPEAT_TOKENS} if round_no == no_repeat_round else {}),
                        "model": self.state.backend.model,
                        "adapter": self.state.backend.active_adapter,
                        "finish_reason": candidate.finish_reason,
                        **({"grammar": kind} if grammar is not None else {}),
                    },
                    truncated=cut_by_limit(candidate.text, candidate.finish_reason),
                    prompt_hash=digest,
                    meta=meta,
                )
            )
        stored = self.state.store.add_nodes(self.state.session_id, new_nodes)
        for node in stored:
            self.recorder.emit_node(node)
        chosen = stored[best]
        self.state.path.append(chosen)
        if self.state.tokens >= self.state.options.max_session_tokens:
            raise Truncated(f"token limit ({self.state.options.max_session_tokens}) reached")
        return chosen, [n for n in stored if n.id != chosen.id]


def cut_by_limit(text: str, finish_reason: str | None) -> bool:
    """Whether the token limit cut what the model wrote: it stopped there, and not in the
    blank lines it padded a finished block with (the coder padded a whole solution.py up
    to the limit; read as cut, that file was never written)."""
    tail = text[len(text.rstrip()) :]
    return finish_reason == "length" and tail.count("\n") <= PADDING_LINES


class SampleStream:
    """A block's candidates as they are sampled, reported through `emit`: the first
    candidate's text so far (`SamplingProgress`: the first piece at once, then at most
    every STREAM_EVERY seconds), and the count and the rate (`BlockSampled`)."""

    def __init__(
        self, emit: Callable[[RuntimeEvent], None], session_id: int, kind: str, tick: int, n: int
    ) -> None:
        self.emit, self.session_id = emit, session_id
        self.kind, self.tick, self.n = kind, tick, n
        self.started = time.monotonic()
        self.tokens = 0
        self.text = ""
        self.last = 0.0

    def piece(self, row: int, text: str) -> None:
        self.tokens += 1
        if row == 0:
            self.text += text
        now = time.monotonic()
        if self.last and now - self.last < STREAM_EVERY:
            return
        self.last = now
        self.emit(
            SamplingProgress(
                session_id=self.session_id,
                block=self.kind,
                tick=self.tick,
                candidates=self.n,
                tokens=self.tokens,
                seconds=round(now - self.started, 2),
                text=self.text[-STREAM_TEXT_CHARS:],
            )
        )

    def done(self, candidates: Sequence[Any]) -> None:
        seconds = time.monotonic() - self.started
        tokens = sum(len(c.token_ids) for c in candidates)
        self.emit(
            BlockSampled(
                session_id=self.session_id,
                block=self.kind,
                tick=self.tick,
                candidates=len(candidates),
                tokens=tokens,
                seconds=round(seconds, 2),
                tokens_per_second=round(tokens / seconds, 1) if seconds > 0 else None,
            )
        )
