// One tool loop of the Vercel AI SDK, driven the way its users drive it (tests/clients/drivers.py
// runs it): `generateText` or `streamText` with one tool and multi-step calls, on the OpenAI
// provider's Responses or Chat Completions model or on the Anthropic provider.
//
//   node ai_sdk_loop.mjs < {"api", "stream", "baseURL", "key", "model", "maxOutputTokens" (or null),
//                           "system", "prompt", "tool", "schema"}
//
// Prints {"answer", "steps", "toolCalls"} as JSON. Retries are off, so one step is one HTTP call.
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, isStepCount, jsonSchema, streamText, tool } from "ai";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const job = JSON.parse(input);

const providers = {
  responses: () => createOpenAI({ baseURL: job.baseURL, apiKey: job.key }).responses(job.model),
  chat: () => createOpenAI({ baseURL: job.baseURL, apiKey: job.key }).chat(job.model),
  messages: () => createAnthropic({ baseURL: job.baseURL, apiKey: job.key })(job.model),
};

const settings = {
  model: providers[job.api](),
  system: job.system,
  prompt: job.prompt,
  maxRetries: 0,
  maxOutputTokens: job.maxOutputTokens ?? undefined,
  stopWhen: isStepCount(4),
  tools: {
    [job.tool]: tool({
      description: "The weather in a city today.",
      inputSchema: jsonSchema(job.schema),
      execute: async ({ city = "Paris", unit = "celsius" }) => ({
        city,
        unit,
        forecast: "sunny",
        temperature: 21,
      }),
    }),
  },
};

let answer;
let steps;
if (job.stream) {
  const result = streamText({ ...settings, onError: ({ error }) => { throw error; } });
  answer = await result.text;
  steps = await result.steps;
} else {
  const result = await generateText(settings);
  answer = result.text;
  steps = result.steps;
}
const toolCalls = steps.reduce((count, step) => count + step.toolCalls.length, 0);
process.stdout.write(JSON.stringify({ answer, steps: steps.length, toolCalls }) + "\n");
