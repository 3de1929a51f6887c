// One tool loop of the Vercel AI SDK, driven the way its users drive it (tests/clients/drivers.py
// runs it): `generateText` or `streamText` with one tool and multi-step calls, on the OpenAI
// provider's Responses or Chat Completions model or on the Anthropic provider.
//
//   node ai_sdk_loop.mjs < {"api", "stream", "baseURL", "key", "model", "maxOutputTokens" (or null),
//                           "system", "prompt", "tool", "schema", "followUp" (or null)}
//
// With `followUp`, the conversation goes on for a second turn after the tool loop.
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

async function run(conversation) {
  if (job.stream) {
    const result = streamText({ ...conversation, onError: ({ error }) => { throw error; } });
    return { text: await result.text, steps: await result.steps, response: await result.response };
  }
  return await generateText(conversation);
}

const first = await run(settings);
const steps = [...first.steps];
let answer = first.text;
if (job.followUp) {
  // The next turn of the conversation, as a chat app sends it: the first answer's messages (which
  // name the Responses API's items by reference, the SDK's default) and the new question.
  const { prompt, ...rest } = settings;
  const messages = [
    { role: "user", content: prompt },
    ...first.response.messages,
    { role: "user", content: job.followUp },
  ];
  const second = await run({ ...rest, messages });
  steps.push(...second.steps);
  answer = second.text;
}
const toolCalls = steps.reduce((count, step) => count + step.toolCalls.length, 0);
process.stdout.write(JSON.stringify({ answer, steps: steps.length, toolCalls }) + "\n");
