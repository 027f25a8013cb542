"""test_agent_frameworks.py — agent frameworks' tool loops against cinfer: openai-agents
(chat completions and Responses) and pydantic-ai (PyPI `pydantic-ai-slim[openai]`).

Quick, on the default 0.5B model: each framework's request renders, the call lands, the
framework runs the tool and ends (openai-agents with tool_use_behavior="stop_on_first_tool";
pydantic-ai with a structured output, which it asks for with tool_choice "required": the
constrained tool-call grammar). Heavy, behind CINFER_E2E_HEAVY=1, on the 1.5B: a two-tool
task (the temperature in Celsius, then its conversion) through every path, the second call
using the first one's result, with parallel_tool_calls false (generation ends at the first
call's end tag). The Qwen2.5-Coder template shows its call example with doubled braces and
lists the tools in <tools></tools>; the 1.5B copies both (`{{"name": ...}}}}`,
`<tools>{...}</tools>`): the parser takes them as calls of declared tools
(tests/data/toolcall/generic/doubled_braces.txt, tools_tags.txt).
"""
import asyncio
import os

import pytest

from conftest import MODELS, QUICK, Server

agents = pytest.importorskip("agents")
pytest.importorskip("pydantic_ai")
from openai import AsyncOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic_ai import Agent as PAgent  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402
from pydantic_ai.settings import ModelSettings as PSettings  # noqa: E402

agents.set_tracing_disabled(True)
HEAVY = os.environ.get("CINFER_E2E_HEAVY") == "1"
QWEN15 = os.path.join(MODELS, "qwen2.5-coder-1.5b-instruct-Q4_K_M.gguf")
pytestmark = pytest.mark.skipif(QUICK, reason="CINFER_E2E_QUICK=1: real-model suite")


def oa_agent(base, api, tools, instructions, parallel=None, **kw):
    client = AsyncOpenAI(base_url=base + "/v1", api_key="x")
    M = agents.OpenAIChatCompletionsModel if api == "chat" else agents.OpenAIResponsesModel
    ms = agents.ModelSettings(temperature=0, max_tokens=200, parallel_tool_calls=parallel)
    return agents.Agent(name="t", instructions=instructions, tools=tools,
                        model=M(model="m", openai_client=client), model_settings=ms, **kw)


def weather_tools(calls):
    @agents.function_tool
    def get_temperature(city: str) -> float:
        """Get the current temperature of a city in degrees Celsius."""
        calls.append(("get_temperature", city))
        return 20.0

    @agents.function_tool
    def c_to_f(celsius: float) -> float:
        """Convert a temperature from degrees Celsius to degrees Fahrenheit."""
        calls.append(("c_to_f", celsius))
        return celsius * 9 / 5 + 32

    return get_temperature, c_to_f


class Answer(BaseModel):
    fahrenheit: float


def pyd_agent(base, instructions, calls, two):
    model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=base + "/v1", api_key="x"))
    a = PAgent(model, output_type=Answer, instructions=instructions,
               model_settings=PSettings(temperature=0, max_tokens=200))
    if two:
        @a.tool_plain
        def get_temperature(city: str) -> float:
            """Get the current temperature of a city in degrees Celsius."""
            calls.append(("get_temperature", city))
            return 20.0

    @a.tool_plain
    def c_to_f(celsius: float) -> float:
        """Convert a temperature from degrees Celsius to degrees Fahrenheit."""
        calls.append(("c_to_f", celsius))
        return celsius * 9 / 5 + 32

    return a


# ---- quick: the 0.5B ----------------------------------------------------------------------

@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai_agents_call_lands(qwen, api):
    calls = []
    get_temperature, _ = weather_tools(calls)
    a = oa_agent(qwen.base, api, [get_temperature], "Use the tool, then answer with the number.",
                 tool_use_behavior="stop_on_first_tool")
    r = asyncio.run(agents.Runner.run(a, "What is the temperature in Paris?", max_turns=3))
    assert calls == [("get_temperature", "Paris")], calls
    assert float(r.final_output) == 20.0


def test_pydantic_ai_structured_output_loop(qwen):
    calls = []
    a = pyd_agent(qwen.base, "Convert with the c_to_f tool, then give the final result.", calls,
                  two=False)
    r = a.run_sync("What is 20 degrees Celsius in Fahrenheit?")
    assert calls == [("c_to_f", 20.0)], calls
    assert r.output.fahrenheit == 68.0


# ---- heavy: the 1.5B, two tools -----------------------------------------------------------

TWO = ("You answer with the tools. First get the temperature in Celsius, then convert it to "
       "Fahrenheit with c_to_f, then {}.")


@pytest.fixture(scope="module")
def qwen15():
    if not HEAVY:
        pytest.skip("CINFER_E2E_HEAVY=1 runs the 1.5B agent loops")
    if not os.path.exists(QWEN15):
        pytest.skip(f"{QWEN15} is missing (scripts/fetch_models.sh qwen2.5-coder-1.5b)")
    s = Server(QWEN15)
    yield s
    assert s.stop() == 0, s.output()


def test_openai_agents_two_tools_chat(qwen15):
    calls = []
    a = oa_agent(qwen15.base, "chat", list(weather_tools(calls)), TWO.format("answer"),
                 parallel=False)
    r = asyncio.run(agents.Runner.run(a, "What is the temperature in Paris in Fahrenheit?",
                                      max_turns=6))
    assert calls == [("get_temperature", "Paris"), ("c_to_f", 20.0)], calls
    assert "68" in r.final_output


def test_openai_agents_two_tools_responses(qwen15):
    """The same task through the Responses path: its function tools render exactly as the
    chat path's (`strict` included, test_responses.py), so the 1.5B answers here too (when
    the conversion dropped `strict`, it wrote a third call instead)."""
    calls = []
    a = oa_agent(qwen15.base, "responses", list(weather_tools(calls)), TWO.format("answer"),
                 parallel=False)
    r = asyncio.run(agents.Runner.run(a, "What is the temperature in Paris in Fahrenheit?",
                                      max_turns=6))
    assert calls == [("get_temperature", "Paris"), ("c_to_f", 20.0)], calls
    assert "68" in r.final_output


def test_pydantic_ai_two_tools(qwen15):
    calls = []
    a = pyd_agent(qwen15.base, TWO.format("give the final result"), calls, two=True)
    r = a.run_sync("What is the temperature in Paris in Fahrenheit?")
    assert calls == [("get_temperature", "Paris"), ("c_to_f", 20.0)], calls
    assert r.output.fahrenheit == 68.0
