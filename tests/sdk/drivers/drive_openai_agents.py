"""Driver for the OpenAI Agents SDK (``openai-agents``): a one-tool agent on the Responses API through
the gateway, its client unchanged but for base URL and key, tracing off (it would export to OpenAI).
Prints one JSON line: ``{"ok": ..., "final_output": ..., "tool_calls": [...]}``.
Run with .sdk-venvs/openai-agents/bin/python.
"""

import argparse
import json
import traceback

p = argparse.ArgumentParser()
p.add_argument("--base-url", required=True)
p.add_argument("--key", required=True)
p.add_argument("--model", required=True)
a = p.parse_args()

calls = []
try:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append({"city": city})
        return f"sunny in {city}"

    client = AsyncOpenAI(api_key=a.key, base_url=a.base_url.rstrip("/") + "/v1", max_retries=0, timeout=30)
    agent = Agent(
        name="weather",
        instructions="Answer with the tool.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=a.model, openai_client=client),
    )
    result = Runner.run_sync(agent, "Weather in Paris? [[tool:get_weather]]", max_turns=4)
    print(json.dumps({"ok": True, "final_output": result.final_output, "tool_calls": calls}))
except Exception as exc:  # noqa: BLE001
    print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}",
                      "tool_calls": calls}))
