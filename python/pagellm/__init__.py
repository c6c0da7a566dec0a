"""pagellm: vLLM's offline Python API over pagellm's engine.

    from pagellm import LLM, SamplingParams
    llm = LLM(model="path/to/model", device="cpu")
    outputs = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=16))
    print(outputs[0].outputs[0].text)
"""

from pagellm._pagellm import __version__
from pagellm.llm import LLM
from pagellm.outputs import CompletionOutput, Logprob, RequestOutput
from pagellm.sampling_params import SamplingParams
from pagellm.tokenizer import Tokenizer

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "Tokenizer", "__version__"]
