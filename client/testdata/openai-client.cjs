// The official OpenAI Node.js client (npm package "openai", installed in
// tools/npm) against `sparkctl proxy`: a chat completion and a completion,
// each plain and streamed. Run by client/e2e_test.go; prints one JSON object.
const path = require("node:path");
const { default: OpenAI } = require(path.join(process.env.OPENAI_NPM_DIR, "node_modules", "openai"));

async function main() {
  const client = new OpenAI({ baseURL: process.env.PROXY_URL, apiKey: "unused-by-the-proxy", maxRetries: 0 });
  const params = {
    max_tokens: Number(process.env.MAX_TOKENS),
    seed: Number(process.env.SEED),
    temperature: Number(process.env.TEMPERATURE),
  };
  const messages = [{ role: "user", content: process.env.PROMPT }];
  const out = {};

  const chat = await client.chat.completions.create({ model: "stories260K", messages, ...params });
  out.Chat = chat.choices[0].message.content;

  const stream = await client.chat.completions.create({ model: "stories260K", messages, ...params, stream: true });
  out.ChatStream = "";
  out.StreamChunks = 0;
  for await (const chunk of stream) {
    out.StreamChunks++;
    if (chunk.choices.length > 0 && chunk.choices[0].delta.content) out.ChatStream += chunk.choices[0].delta.content;
  }

  const comp = await client.completions.create({ model: "stories260K", prompt: process.env.PROMPT, ...params });
  out.Completion = comp.choices[0].text;

  const cstream = await client.completions.create({ model: "stories260K", prompt: process.env.PROMPT, ...params, stream: true });
  out.CompletionStream = "";
  for await (const chunk of cstream) {
    if (chunk.choices.length > 0) out.CompletionStream += chunk.choices[0].text;
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
