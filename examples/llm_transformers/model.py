"""A causal language model from Hugging Face transformers, served with continuous batching.

Triton's Python-model API (``model.py``) in the request convention of Triton's vLLM backend:
``text_input`` (the prompt), ``stream``, ``sampling_parameters`` (JSON: ``max_tokens``,
``min_tokens``, ``temperature``, ``top_p``, ``top_k``, ``seed``, ``stop``,
``stop_token_ids``, ``ignore_eos``), ``exclude_input_in_output``,
``return_num_input_tokens``, ``return_num_output_tokens``; the answer in ``text_output``.

Continuous batching through the core's iterative sequences (``sequence_batching {
iterative_sequence: true }``, decoupled): every ``execute(requests)`` is ONE decoding step
for every request in the batch. Each request gets its next token (a response; streamed: one
per token, the last with the FINAL flag; otherwise the whole text at the end), and each
unfinished one is released with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``, which puts it
back in the batcher: requests that arrived meanwhile join the next step, finished ones
leave. A request's state between steps (tokens, KV cache, sampler) is kept here, by its
correlation ID (the batcher gives each request one of its own; its first step has START).

A step is one forward pass for the requests already running (their last token, over their
KV caches, left-padded to the longest, with an attention mask and position ids) and, when
requests joined, one for their prompts (left-padded likewise) before it: the joiners' first
tokens go out before the running requests' pass (time to first token). The running
requests' caches stay one batch from step to step; it is gathered again only when requests
join, leave or come in another order. With ``kv_cache`` off,
every step runs each whole sequence again in one pass instead: slower, but it works for any
model ``AutoModelForCausalLM`` loads, whatever its cache.

A request whose client went away (``request.is_cancelled()``, asked every step) ends at
once: no more steps run for it.

Config parameters: ``hf_model`` (the ``save_pretrained`` folder, relative to the version
folder; default ``hf``), ``torch_threads`` (default 1), ``kv_cache`` (default ``true``),
``step_log`` (a file: one JSON line per step, which requests it ran; for tests and
curiosity).
"""

from __future__ import annotations

import gc
import inspect
import json
import time
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
START = pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
#: vLLM's default when a request names no max_tokens
DEFAULT_MAX_TOKENS = 16
#: temperatures below this sample greedily
GREEDY = 1e-5


def _input(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    value = tensor.as_numpy().reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else value


class Generation:
    """One request between steps: its tokens, its KV cache, how the next token is chosen,
    what was sent."""

    def __init__(self, prompt, sampling, ids, positions, eos_ids):
        if not isinstance(sampling, dict):
            raise ValueError("sampling_parameters must be a JSON object")
        if int(sampling.get("n") or 1) != 1:
            raise ValueError("only n=1 is supported")
        if not ids:
            raise ValueError("the prompt has no tokens")
        if len(ids) >= positions:
            raise ValueError(
                f"the prompt has {len(ids)} tokens; the model takes at most {positions - 1}"
            )
        self.name = ""
        self.prompt = prompt
        self.ids = list(ids)
        self.prompt_count = len(ids)
        #: the KV cache of every token but the last (the next step's input), while it is
        #: not in the engine's batch: (keys, values) per layer, each
        #: [1, heads, len(ids) - 1, dim]; None before the first step and while in the batch
        self.past = None
        #: the row of the engine's batched KV cache that holds this request's (None: not in it)
        self.row = None
        self.stream = False
        self.echo = False
        self.want_input_count = self.want_output_count = False
        max_tokens = int(sampling.get("max_tokens") or DEFAULT_MAX_TOKENS)
        self.max_tokens = min(max_tokens, positions - len(ids))
        self.min_tokens = int(sampling.get("min_tokens") or 0)
        self.temperature = float(sampling.get("temperature", 1.0))
        self.top_p = float(sampling.get("top_p", 1.0))
        self.top_k = int(sampling.get("top_k") or 0)
        self.stop_ids = set() if sampling.get("ignore_eos") else set(eos_ids)
        self.stop_ids.update(int(token) for token in sampling.get("stop_token_ids") or ())
        stop = sampling.get("stop") or []
        self.stops = [text for text in ([stop] if isinstance(stop, str) else stop) if text]
        seed = sampling.get("seed")
        self.generator = torch.Generator()
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))
        self.generated = []
        #: the text of ``generated``; settled up to ``read_offset``, decoded again from
        #: ``prefix_offset`` each step (vLLM's incremental detokenization)
        self.text = ""
        self.settled_text = ""
        self.prefix_offset = self.read_offset = 0
        self.sent = 0
        self.echoed = False
        self.done = False

    @classmethod
    def from_request(cls, request, tokenizer, positions, eos_ids):
        prompt = _input(request, "text_input", "")
        sampling = json.loads(_input(request, "sampling_parameters", None) or "{}")
        ids = tokenizer(prompt)["input_ids"]
        generation = cls(prompt, sampling, ids, positions, eos_ids)
        generation.name = request.request_id() or str(request.correlation_id())
        generation.stream = bool(_input(request, "stream", False))
        exclude = _input(request, "exclude_input_in_output", None)
        # as the vLLM backend: the prompt is prepended unless excluded, and by default only
        # to an answer that is not streamed
        generation.echo = (not exclude) if exclude is not None else not generation.stream
        generation.want_input_count = bool(_input(request, "return_num_input_tokens", False))
        generation.want_output_count = bool(_input(request, "return_num_output_tokens", False))
        return generation

    @property
    def started(self):
        """Whether its prompt has been through the model (its KV cache exists)."""
        return self.past is not None or self.row is not None

    def choose(self, logits):
        """The next token, from this request's row of the step's logits."""
        return choose_tokens([self], logits.unsqueeze(0))[0]

    def masks_stop_ids(self):
        """Whether the stop tokens are barred this step (``min_tokens`` not reached)."""
        return bool(self.stop_ids) and len(self.generated) < self.min_tokens

    def advance(self, token, tokenizer):
        """Add ``token``; the text to send for it (what is sure not to change any more)."""
        self.ids.append(token)
        if token in self.stop_ids and len(self.generated) >= self.min_tokens:
            self.done = True  # the stop token itself is not part of the answer
        else:
            self.generated.append(token)
            self._decode_tail(tokenizer)
        if len(self.generated) >= self.max_tokens:
            self.done = True
        self._cut_at_stop()
        end = len(self.text) if self.done else self._settled()
        delta, self.sent = self.text[self.sent : end], max(self.sent, end)
        return delta

    def _decode_tail(self, tokenizer):
        """``text`` with the new token: only the tokens from ``prefix_offset`` are decoded
        again, not the whole answer each step. The tokens before ``read_offset`` decoded to
        whole characters, so the text splits there; the few before it give the tail its
        context (a leading space, a byte sequence)."""
        window = self.generated[self.prefix_offset :]
        known = tokenizer.decode(
            window[: self.read_offset - self.prefix_offset], skip_special_tokens=True
        )
        tail = tokenizer.decode(window, skip_special_tokens=True)[len(known) :]
        if tail and not tail.endswith("\ufffd"):  # whole characters: the split moves on
            self.settled_text += tail
            self.prefix_offset, self.read_offset = self.read_offset, len(self.generated)
            tail = ""
        self.text = self.settled_text + tail

    def _cut_at_stop(self):
        if not self.stops:
            return
        start = max(0, self.sent - max(len(stop) for stop in self.stops))
        found = [i for i in (self.text.find(stop, start) for stop in self.stops) if i >= 0]
        if found:
            self.text = self.text[: min(found)]
            self.done = True

    def _settled(self):
        """How much of the text may be sent: not a trailing partial UTF-8 character, nor a
        tail that may still become a stop string."""
        end = len(self.text.rstrip("\ufffd"))
        for stop in self.stops:
            for size in range(min(len(stop) - 1, end), 0, -1):
                if self.text.endswith(stop[:size], 0, end):
                    end = min(end, len(self.text) - size)
                    break
        return max(end, self.sent)

    def outputs(self, delta):
        """(text, input token count, output token count) of this step's response: the
        token's text (streamed) or the whole answer (at the end)."""
        if self.stream:
            text = delta
            if self.echo and not self.echoed:
                text, self.echoed = self.prompt + delta, True
            return text, self.prompt_count, 1
        text = self.prompt + self.text if self.echo else self.text
        return text, self.prompt_count, len(self.generated)


def choose_tokens(generations, logits):
    """The next token of each generation, from its row of the step's logits.

    Greedy rows take their argmax; the others are sampled in one pass over the rows that
    sample (temperature, top-k, softmax, top-p, cumulative sums), each drawing its one
    uniform number from its own generator (``seed``) and taking the token where that number
    falls in its cumulative distribution: one small operation per request instead of a
    ``torch.multinomial`` call each, which dominated a step's sampling."""
    masked = [row for row, g in enumerate(generations) if g.masks_stop_ids()]
    if masked:
        logits = logits.clone()
        for row in masked:
            logits[row, list(generations[row].stop_ids)] = float("-inf")
    tokens = [0] * len(generations)
    greedy = [row for row, g in enumerate(generations) if g.temperature < GREEDY]
    if greedy:
        for row, token in zip(greedy, logits[greedy].argmax(dim=-1).tolist(), strict=True):
            tokens[row] = token
    sampled = [row for row, g in enumerate(generations) if g.temperature >= GREEDY]
    if not sampled:
        return tokens
    chosen = [generations[row] for row in sampled]
    temperatures = torch.tensor([[g.temperature] for g in chosen], dtype=logits.dtype)
    scaled = logits[sampled] / temperatures
    vocab = scaled.shape[-1]
    for row, generation in enumerate(chosen):
        if 0 < generation.top_k < vocab:
            kth = torch.topk(scaled[row], generation.top_k).values[-1]
            scaled[row].masked_fill_(scaled[row] < kth, float("-inf"))
    probabilities = torch.softmax(scaled, dim=-1)
    for row, generation in enumerate(chosen):
        if generation.top_p < 1.0:
            ordered, order = torch.sort(probabilities[row], descending=True)
            outside = torch.cumsum(ordered, dim=-1) - ordered > generation.top_p
            probabilities[row, order[outside]] = 0.0
    cumulative = torch.cumsum(probabilities, dim=-1)
    draws = torch.cat([torch.rand(1, generator=g.generator) for g in chosen])
    # right=True: a zero-probability token (a flat step of the sums) is never the one
    points = (draws * cumulative[:, -1]).unsqueeze(1)
    found = torch.searchsorted(cumulative, points, right=True).squeeze(1).clamp_(max=vocab - 1)
    for row, token in zip(sampled, found.tolist(), strict=True):
        tokens[row] = token
    return tokens


def _padded(rows, pad):
    """Token rows left-padded to the longest: (ids, attention mask, position ids)."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row) :] = torch.tensor(row, dtype=torch.long)
        mask[index, width - len(row) :] = 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp_(min=0)


def _own_rows(layers, row, length):
    """One request's cache from a batched one: its row's last ``length`` columns (views; a
    row's tokens are on the right, padding on the left), (keys, values) per layer."""
    return [
        (
            keys[row : row + 1, :, keys.shape[2] - length :],
            values[row : row + 1, :, values.shape[2] - length :],
        )
        for keys, values in layers
    ]


class Engine:
    """The model and its tokenizer, and the forward passes of a step."""

    def __init__(self, path, kv_cache=True):
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        self.model.eval()
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = {t for t in [*eos, self.tokenizer.eos_token_id] if t is not None}
        self.pad_id = self.tokenizer.pad_token_id or 0
        self.positions = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.kv_cache = kv_cache
        # transformers 5 names the argument `cache` (`past_key_values` before)
        parameters = inspect.signature(self.model.forward).parameters
        self.cache_argument = "cache" if "cache" in parameters else "past_key_values"
        #: the generations of the last decoding pass, in its row order, and its KV cache
        #: ((keys, values) per layer, [rows, heads, width, dim], each row's tokens on the
        #: right): the next pass starts from it
        self.batch = []
        self.batch_layers = []

    def generation(self, prompt, sampling=None):
        ids = self.tokenizer(prompt)["input_ids"]
        return Generation(prompt, sampling or {}, ids, self.positions, self.eos_ids)

    def step(self, generations):
        """The logits of the next token of each generation (rows in their order)."""
        if not self.kv_cache:
            return self._run([g.ids for g in generations], None)
        fresh = [index for index, g in enumerate(generations) if not g.started]
        if len(fresh) == len(generations):
            return self._prefill(generations)
        if not fresh:
            return self._decode(generations)
        running = [index for index, g in enumerate(generations) if g.started]
        logits = torch.empty((len(generations), self.model.config.vocab_size))
        logits[fresh] = self._prefill([generations[index] for index in fresh])
        logits[running] = self._decode([generations[index] for index in running])
        return logits

    def _run(self, rows, cache, mask=None, positions=None):
        if mask is None:
            ids, mask, positions = _padded(rows, self.pad_id)
        else:
            ids = torch.tensor(rows, dtype=torch.long)
        arguments = {self.cache_argument: cache} if cache is not None else {}
        with torch.inference_mode():
            output = self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=cache is not None,
                logits_to_keep=1,
                **arguments,
            )
        return output.logits[:, -1, :].float()

    def _keep(self, generations, cache):
        """Each generation's rows of the step's cache, without the left padding."""
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        for row, generation in enumerate(generations):
            generation.past = _own_rows(layers, row, len(generation.ids))

    def _prefill(self, generations):
        """The prompts, left-padded, in one pass that fills their caches."""
        cache = DynamicCache(config=self.model.config)
        logits = self._run([g.ids for g in generations], cache)
        self._keep(generations, cache)
        return logits

    def _decode(self, generations):
        """The last token of each generation over its cache, the caches left-padded to the
        longest in one batch that stays from step to step."""
        lengths = [len(g.ids) - 1 for g in generations]
        width = max(lengths)
        past = self._batch_past(generations, width)
        mask = torch.zeros((len(generations), width + 1), dtype=torch.long)
        for row, length in enumerate(lengths):
            mask[row, width - length :] = 1
        positions = torch.tensor([[length] for length in lengths], dtype=torch.long)
        cache = DynamicCache(past)
        rows = [[g.ids[-1]] for g in generations]
        logits = self._run(rows, cache, mask, positions)
        self.batch = list(generations)
        self.batch_layers = [(layer.keys, layer.values) for layer in cache.layers]
        for row, generation in enumerate(generations):
            generation.row, generation.past = row, None
        return logits

    def _batch_past(self, generations, width):
        """The step's KV cache, [rows, heads, width, dim] per layer: last step's batch as
        it is when the same requests run again in the same order (the usual step), else
        gathered from its rows and the caches of requests that just had their prefill."""
        layers = self.batch_layers
        old = layers[0][0].shape[2] if layers else 0
        same = len(generations) == len(self.batch) and all(
            a is b for a, b in zip(generations, self.batch, strict=True)
        )
        if same:  # each row grew by the token of the last step, so the width did too
            return layers
        self._park_batch({id(g) for g in generations})
        from_batch = [(row, g.row) for row, g in enumerate(generations) if g.row is not None]
        kept = min(old, width)
        if from_batch:
            rows = [row for row, _ in from_batch]
            sources = torch.tensor([source for _, source in from_batch], dtype=torch.long)
        own = [(row, g) for row, g in enumerate(generations) if g.row is None]
        past = []
        for layer, (sample, _) in enumerate(layers or own[0][1].past):
            keys = sample.new_zeros((len(generations), sample.shape[1], width, sample.shape[3]))
            values = torch.zeros_like(keys)
            if from_batch:  # one gather per tensor, whatever the number of rows
                batch_keys, batch_values = layers[layer]
                keys[rows, :, width - kept :] = batch_keys[sources, :, old - kept :]
                values[rows, :, width - kept :] = batch_values[sources, :, old - kept :]
            for row, generation in own:
                own_keys, own_values = generation.past[layer]
                keys[row, :, width - own_keys.shape[2] :] = own_keys[0]
                values[row, :, width - own_values.shape[2] :] = own_values[0]
            past.append((keys, values))
        return past

    def _park_batch(self, staying):
        """Take the batch's requests that are not in ``staying`` out of it, each keeping
        its own rows of the cache (a view) for a later step; finished ones drop theirs."""
        for generation in self.batch:
            if id(generation) in staying or generation.row is None:
                continue
            if not generation.done:
                generation.past = _own_rows(
                    self.batch_layers, generation.row, len(generation.ids) - 1
                )
            generation.row = None


def _text(value):
    return np.array([[value.encode("utf-8")]], dtype=object)


def _count(value):
    return np.array([[value]], dtype=np.uint32)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {
            key: value.get("string_value", "")
            for key, value in (config.get("parameters") or {}).items()
        }
        folder = Path(args["model_repository"]) / args["model_version"]
        torch.set_num_threads(int(parameters.get("torch_threads", "1")))
        kv_cache = parameters.get("kv_cache", "true").lower() not in ("false", "0", "no")
        self.engine = Engine(folder / parameters.get("hf_model", "hf"), kv_cache)
        #: correlation ID -> the request's Generation
        self.generations = {}
        self.steps = 0
        step_log = parameters.get("step_log")
        self.step_log = open(step_log, "a", buffering=1) if step_log else None  # noqa: SIM115
        labels = {"model": args["model_name"]}
        self.batch_sizes = pb_utils.MetricFamily(
            "llm_step_batch_size", "Requests in each decoding step", pb_utils.MetricFamily.HISTOGRAM
        ).Metric(labels=labels, buckets=[1, 2, 4, 8, 16, 32, 64])
        self.tokens = pb_utils.MetricFamily(
            "llm_generated_tokens", "Tokens generated", pb_utils.MetricFamily.COUNTER
        ).Metric(labels=labels)
        # torch, transformers and the model are here for good: keep them out of the
        # collector's full passes, which would scan them all in the middle of a step
        gc.collect()
        gc.freeze()

    def execute(self, requests):
        started = time.perf_counter()
        running, new, failed = self._admit(requests)
        finished, cancelled = [], []
        tokens = 0
        for group in self._passes(running):
            tokens += self._step(group, finished, cancelled, failed)
        if running:
            self.batch_sizes.observe(len(running))
            self.tokens.increment(tokens)
        self.steps += 1
        if self.step_log is not None:
            record = {
                "step": self.steps,
                "time": time.monotonic(),
                "ms": round((time.perf_counter() - started) * 1000, 3),
                "batch": [generation.name for _, _, generation in running],
                "new": new,
                "finished": finished,
                "cancelled": cancelled,
                "failed": failed,
            }
            self.step_log.write(json.dumps(record) + "\n")
        return None

    def _admit(self, requests):
        """(request, correlation ID, Generation) of each request of the step, the names of
        those that start here, and of those that failed already (a prompt it cannot take)."""
        running, new, failed = [], [], []
        for request in requests:
            key = request.correlation_id()
            generation = self.generations.get(key)
            if generation is None or request.flags() & START:
                try:
                    generation = Generation.from_request(
                        request, self.engine.tokenizer, self.engine.positions, self.engine.eos_ids
                    )
                except Exception as error:  # the request's own fault: it alone fails
                    self._fail(request, key, error)
                    failed.append(request.request_id() or str(key))
                    continue
                self.generations[key] = generation
                new.append(generation.name)
            running.append((request, key, generation))
        return running, new, failed

    def _passes(self, running):
        """The step's forward passes: the prompts of the requests that just joined first,
        so that their first tokens go out before the others' pass runs (time to first
        token), then the running requests' next tokens."""
        if not self.engine.kv_cache:
            return [running] if running else []
        fresh = [item for item in running if not item[2].started]
        if not fresh or len(fresh) == len(running):
            return [running] if running else []
        return [fresh, [item for item in running if item[2].started]]

    def _step(self, running, finished, cancelled, failed):
        """One forward pass for ``running`` and each request's response for its token; how
        many tokens it chose."""
        engine = self.engine
        try:
            logits = engine.step([generation for _, _, generation in running])
        except Exception as error:  # every request of the pass fails with it
            pb_utils.Logger.log_error(f"the forward pass failed: {error!r}")
            for request, key, generation in running:
                self._fail(request, key, error)
                failed.append(generation.name)
            return 0
        gone = self._cancelled([request for request, _, _ in running])
        try:
            tokens = choose_tokens([generation for _, _, generation in running], logits)
        except Exception:  # chosen one by one below: only a failing request fails
            tokens = None
        chosen = 0
        for row, (request, key, generation) in enumerate(running):
            sender = request.get_response_sender()
            if gone[row]:
                del self.generations[key]
                generation.done = True
                sender.send(flags=FINAL)
                cancelled.append(generation.name)
                continue
            try:
                token = generation.choose(logits[row]) if tokens is None else tokens[row]
                delta = generation.advance(token, engine.tokenizer)
                # streamed: a response for each token; otherwise one at the end
                response = None
                if generation.stream or generation.done:
                    response = self._response(generation, delta)
            except Exception as error:  # this request ends with it, the others go on
                self._fail(request, key, error)
                failed.append(generation.name)
                continue
            chosen += 1
            if generation.done:
                del self.generations[key]
                sender.send(response, flags=FINAL)
                finished.append(generation.name)
                continue
            if response is not None:
                sender.send(response)
            request.set_release_flags(RESCHEDULE)
        return chosen

    @staticmethod
    def _cancelled(requests):
        """``request.is_cancelled()`` of each request: answered in the model's process
        (the server tells it when a client goes away), so asking every step costs little."""
        return [request.is_cancelled() for request in requests]

    @staticmethod
    def _response(generation, delta):
        text, input_count, output_count = generation.outputs(delta)
        outputs = [pb_utils.Tensor("text_output", _text(text))]
        if generation.want_input_count:
            outputs.append(pb_utils.Tensor("num_input_tokens", _count(input_count)))
        if generation.want_output_count:
            outputs.append(pb_utils.Tensor("num_output_tokens", _count(output_count)))
        return pb_utils.InferenceResponse(outputs)

    def _fail(self, request, key, error):
        generation = self.generations.pop(key, None)
        if generation is not None:
            generation.done = True
        request.get_response_sender().send(
            pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))), flags=FINAL
        )

    def finalize(self):
        if self.step_log is not None:
            self.step_log.close()
