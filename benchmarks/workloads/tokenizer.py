"""A byte-level BPE tokenizer trained here, with the ``tokenizers`` package, on
the corpus the workloads come from, so that token ids split text the way a
production tokenizer would; trained once per corpus and size, then read from
the output folder."""

import hashlib
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from benchmarks.workloads.corpus import Corpus

DEFAULT_VOCAB_SIZE = 32_768
# Chat and agent prompts mark their turns the way chat templates do; each marker is one id.
SPECIAL_TOKENS = ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>")


def train(texts: list[str], vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    # Byte-level: any text encodes, and decoding gives back exactly the text encoded.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def file_name(corpus_sha256: str, vocab_size: int, training_bytes: int | None) -> str:
    """Names what the tokenizer was trained from, so a cached one is reused only for the same."""
    key = f"{corpus_sha256}:{vocab_size}:{training_bytes}:{tokenizers.__version__}"
    return f"tokenizer-{vocab_size}-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"


def load_or_train(out: Path, corpus: Corpus, vocab_size: int,
                  training_bytes: int | None) -> tuple[Tokenizer, Path]:
    path = out / file_name(corpus.sha256(), vocab_size, training_bytes)
    if path.exists():
        return Tokenizer.from_file(str(path)), path
    tokenizer = train(corpus.training_texts(training_bytes), vocab_size)
    tokenizer.save(str(path))
    return tokenizer, path
