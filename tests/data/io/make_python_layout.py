# Writes python_layout.safetensors with the python safetensors library, the reference for
# SafetensorsWriter's byte layout (test_safetensors.cpp: PythonWrittenFile*). Needs torch and
# safetensors; run as `OUT=dir python3 make_python_layout.py`.
import os

import safetensors
import torch
from safetensors.torch import save_file

tensors = {
    "b.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "a.bias": torch.tensor([0.5, -1.25], dtype=torch.float32),
    "a.weight": torch.arange(5, dtype=torch.float32).to(torch.bfloat16),
    "h": torch.tensor([1.0, -2.0, 0.333], dtype=torch.float16),
    "i": torch.tensor([7, -8, 9], dtype=torch.int32),
    "z": torch.tensor([[1, 2**40]], dtype=torch.int64),
    "m": torch.tensor([1, 2, 255], dtype=torch.uint8),
    "layers.10.w": torch.ones(1, dtype=torch.float32),
    "layers.2.w": torch.zeros(1, dtype=torch.float32),
    "scalar": torch.tensor(3.0, dtype=torch.bfloat16),
}
path = os.path.join(os.environ.get("OUT", "."), "python_layout.safetensors")
save_file(tensors, path, metadata={"format": "pt"})
with open(path, "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    print(repr(f.read(n)))
print("safetensors", safetensors.__version__, "torch", torch.__version__)
