"""Run by the vLLM venv's python: write a tiny random-weight Llama and its tokenizer to argv[1].

LlamaConfig with 2 layers, hidden 256, 4 heads (head_dim 64), bf16; a byte-level BPE tokenizer
(vocab 1024) trained on the standard library's own .py files. Nothing comes from a model hub.
"""

import pathlib
import sys
import sysconfig

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

target = pathlib.Path(sys.argv[1])
target.mkdir(parents=True, exist_ok=True)
stdlib = sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:200]
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(
    vocab_size=1024,
    special_tokens=["<s>", "</s>", "<unk>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
)
tokenizer.train([str(p) for p in stdlib], trainer)
fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
fast.save_pretrained(target)

torch.manual_seed(0)
config = LlamaConfig(
    vocab_size=len(fast),
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    head_dim=64,
    max_position_embeddings=512,
    bos_token_id=fast.bos_token_id,
    eos_token_id=fast.eos_token_id,
    torch_dtype="bfloat16",
)
LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(target)
print(f"tiny model in {target}: {sum(p.stat().st_size for p in target.iterdir())} bytes")
