"""The fixture layer of Triton's OpenAI tests, for triton-core: what ``tests/utils.py`` and
``tests/conftest.py`` of Triton's ``python/openai`` provide, on a real ``triton-core serve``.

- :class:`OpenAIServer` takes Triton's ``main.py`` command line and runs ``triton-core serve``
  with ``--openai-port 0`` (the port from the ports file), the openai client on it.
- ``setup_server`` / ``setup_fastapi_app`` / :class:`TestClient`: Triton builds an in-process
  server and a FastAPI app for each test class; here the same three calls start one server
  process for the app's settings, and the client is an ``httpx.Client`` on its port (the
  API a FastAPI ``TestClient`` has).
- :func:`build_tokenizer`: Triton's tests take Llama 3.1's tokenizer from the Hugging Face
  hub; here a small word-level tokenizer is trained and saved locally, with a Llama-3-style
  chat template that renders tools, so that nothing is downloaded.
- The models: Triton's ``mock_llm``, ``identity_py`` and ``tool_stream_py`` (vendored in
  ``triton_models/``), and ``mock_vllm`` (``mock_models/``), a mock LLM in the vLLM backend's
  convention standing in for Triton's ``llama-3.1-8b-instruct`` on vLLM.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import httpx
import openai

from triton_core.testing import ServerProcess

HERE = Path(__file__).parent
TRITON_MODELS = HERE / "triton_models"
MOCK_MODELS = HERE / "mock_models"
#: the vLLM stand-in for Triton's llama-3.1-8b-instruct
MOCK_VLLM = "mock_vllm"
#: Triton's --http-max-input-size default (64 MiB), as its utils.utils has it
HTTP_DEFAULT_MAX_INPUT_SIZE = 1 << 26

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}<|start_header_id|>system<|end_header_id|>\n\n"
    "You have access to these tools:\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|eot_id|>{% endif %}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] %}{% for part in message['content'] %}{{ part['text'] }}"
    "{% endfor %}{% endif %}"
    "{% if message['tool_calls'] %}{% for call in message['tool_calls'] %}"
    '{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}'
    "{% endfor %}{% endif %}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def build_tokenizer(folder: Path, chat_template: str | None = CHAT_TEMPLATE) -> Path:
    """A word-level tokenizer trained here and saved to ``folder`` as transformers saves one
    (with ``chat_template`` in its config, or none)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<|begin_of_text|>", "<|eot_id|>"]
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["What is machine learning?", "the weather in Dallas Texas", "hello world"]
    tokenizer.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=specials))
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
    )
    if chat_template is not None:
        wrapped.chat_template = chat_template
    wrapped.save_pretrained(folder)
    return folder


def repository(*models: tuple[Path, str]) -> Path:
    """A fresh repository holding ``models`` (source folder, name)."""
    root = Path(tempfile.mkdtemp(prefix="openai-models-"))
    for source, name in models:
        shutil.copytree(source, root / name)
    return root


def vllm_repository(name: str = MOCK_VLLM) -> Path:
    return repository((MOCK_MODELS / MOCK_VLLM, name))


def triton_test_models() -> Path:
    """Triton's ``tests/test_models``: mock_llm and identity_py."""
    return repository(
        (TRITON_MODELS / "mock_llm", "mock_llm"), (TRITON_MODELS / "identity_py", "identity_py")
    )


def tool_parser_models() -> Path:
    return repository((TRITON_MODELS / "tool_stream_py", "tool_stream_py"))


#: Triton main.py flags that triton-core serve does not have (its KServe frontends are on)
_TRITON_ONLY_FLAGS = {"--enable-kserve-frontends": 0, "--uvicorn-log-level": 1}


def _serve_args(cli_args: list[str]) -> tuple[list[str], list[str]]:
    """Triton's main.py arguments as (repositories, further serve flags)."""
    repositories, args = [], []
    index = 0
    while index < len(cli_args):
        arg = cli_args[index]
        if arg in _TRITON_ONLY_FLAGS:
            index += 1 + _TRITON_ONLY_FLAGS[arg]
            continue
        if arg == "--model-repository":
            repositories.append(cli_args[index + 1])
            index += 2
            continue
        args.append(arg)
        index += 1
    return repositories, args


class OpenAIServer:
    """Triton's test ``OpenAIServer``: the frontend in a real server process, started by the
    constructor, which raises with the server's log when it cannot start."""

    API_KEY = "EMPTY"

    def __init__(self, cli_args: list[str], *, env_dict: dict[str, str] | None = None) -> None:
        repositories, args = _serve_args(cli_args)
        self.host = "127.0.0.1"
        self.process = ServerProcess(
            repositories,
            *args,
            "--openai-port",
            "0",
            "--openai-address",
            self.host,
            env=env_dict,
        )
        try:
            self.process.wait_ready(timeout=120)
            self.port = self.process.port("openai")
        except (RuntimeError, TimeoutError, LookupError) as error:
            self.process.stop()
            raise RuntimeError(f"Server failed to start:\n{self.process.log()}") from error

    def __enter__(self) -> OpenAIServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.process.stop()

    @property
    def url_root(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url_for(self, *parts: str) -> str:
        return self.url_root + "/" + "/".join(parts)

    def get_client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.API_KEY)

    def get_async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.API_KEY)


class _ServerSpec:
    """What Triton's ``setup_server`` starts: here only remembered, the process starts with
    the app (one process per app: the frontend's settings are flags)."""

    def __init__(self, model_repository: str, explicit: bool, load_models: list[str]) -> None:
        self.model_repository = model_repository
        self.explicit = explicit
        self.load_models = load_models
        self.apps: list[_App] = []

    def stop(self) -> None:
        for app in self.apps:
            app.stop()


class _App:
    def __init__(self, server: _ServerSpec, args: list[str]) -> None:
        self.args = ["--model-repository", server.model_repository, *args]
        if server.explicit:
            self.args += ["--model-control-mode", "explicit"]
            for name in server.load_models:
                self.args += ["--load-model", name]
        self.running: OpenAIServer | None = None

    def start(self) -> OpenAIServer:
        if self.running is None:
            self.running = OpenAIServer(self.args)
        return self.running

    def stop(self) -> None:
        if self.running is not None:
            self.running.process.stop()
            self.running = None


def setup_server(
    model_repository: str, model_control_mode: str = "none", load_models: list[str] | None = None
) -> _ServerSpec:
    return _ServerSpec(str(model_repository), model_control_mode == "explicit", load_models or [])


def setup_fastapi_app(
    tokenizer: str | None,
    server: _ServerSpec,
    backend: str | None,
    default_max_tokens: int = 16,
    tool_call_parser: str | None = None,
    max_tool_call_parse_bytes: int | None = None,
) -> _App:
    args = ["--default-max-tokens", str(default_max_tokens)]
    if tokenizer == "gpt2":  # Triton's tokenizer without a chat template, from the hub
        tokenizer = str(build_tokenizer(Path(tempfile.mkdtemp(prefix="gpt2-")), None))
    if tokenizer:
        args += ["--tokenizer", str(tokenizer)]
    if backend:
        args += ["--backend", backend]
    if tool_call_parser:
        args += ["--tool-call-parser", tool_call_parser]
    if max_tool_call_parse_bytes is not None:
        args += ["--max-tool-call-parse-bytes", str(max_tool_call_parse_bytes)]
    app = _App(server, args)
    server.apps.append(app)
    return app


class TestClient(httpx.Client):
    """FastAPI's ``TestClient(app)``: an HTTP client on the app's server process, which runs
    while the client is open."""

    __test__ = False  # not a test class

    def __init__(self, app: _App, **options: Any) -> None:
        self.app = app
        running = app.start()
        super().__init__(base_url=running.url_root, timeout=120, **options)

    def __exit__(self, *exc_info: Any) -> None:
        super().__exit__(*exc_info)
        self.app.stop()


class tritonserver:  # stands in for Triton's in-process module in the tests
    """What the tests take from Triton's ``tritonserver`` module."""

    Server = _ServerSpec

    class ModelControlMode:
        NONE = "none"
        EXPLICIT = "explicit"


class RestrictedFeatures:
    """Triton's parsed ``--openai-restricted-api`` groups, over the plugin's."""

    def __init__(self, args: list[list[str]]) -> None:
        from triton_core_openai.app import Restrictions

        self._restrictions = Restrictions(args)

    def RestrictionSummary(self) -> dict[str, str]:  # Triton's name
        return self._restrictions.summary()


class FastApiFrontend:
    """Triton's frontend constructor, as the startup-log test uses it: here a server process
    with the same restrictions, whose log is printed as Triton's frontend prints its own."""

    def __init__(self, engine: object, restricted_apis: list[list[str]]) -> None:
        args = ["--model-repository", str(HERE / "test_models")]
        for group in restricted_apis:
            args += ["--openai-restricted-api", *group]
        with OpenAIServer(args) as server:
            print(server.process.log())


class RequestSizeLimitMiddleware:
    """The message of a body over ``--http-max-input-size``, as the server's HTTP protocol
    words it (Triton's middleware words it differently)."""

    @staticmethod
    def _oversized_request_message(actual_bytes: int, max_bytes: int) -> str:
        return (
            f"request body size ({actual_bytes} bytes) exceeds the maximum allowed value of "
            f"{max_bytes} bytes. Use --http-max-input-size to increase the limit."
        )
