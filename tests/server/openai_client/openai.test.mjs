// The official openai client against a running `kvserve serve`: chat and completions,
// streaming and not, with logprobs and stop. KVSERVE_BASE_URL (e.g. http://127.0.0.1:8000/v1)
// and KVSERVE_MODEL come from tests/server/openai_client_test.cc.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({
  baseURL: process.env.KVSERVE_BASE_URL,
  apiKey: process.env.KVSERVE_API_KEY ?? 'unused',
  maxRetries: 0,
});
const model = process.env.KVSERVE_MODEL;

test('models.list names the served model', async () => {
  const models = await client.models.list();
  assert.equal(models.data[0].id, model);
});

test('completions, plain and streamed, agree', async () => {
  const params = { model, prompt: 'Once upon a time', max_tokens: 20, temperature: 0, logprobs: 2 };
  const whole = await client.completions.create(params);
  assert.equal(whole.choices[0].finish_reason, 'length');
  assert.equal(whole.usage.completion_tokens, 20);
  assert.equal(whole.choices[0].logprobs.tokens.length, 20);
  let text = '';
  for await (const chunk of await client.completions.create({ ...params, stream: true })) {
    text += chunk.choices[0]?.text ?? '';
  }
  assert.equal(text, whole.choices[0].text);
});

test('stop strings end the completion before them', async () => {
  const base = { model, prompt: 'Once upon a time', max_tokens: 30, temperature: 0 };
  const full = (await client.completions.create(base)).choices[0].text;
  const stop = full.slice(8, 11);
  const stopped = await client.completions.create({ ...base, stop: [stop] });
  assert.equal(stopped.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
});

test('chat, plain and streamed, with logprobs and usage', async () => {
  const params = {
    model, max_tokens: 16, temperature: 0, logprobs: true, top_logprobs: 2,
    messages: [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: 'Hi' }],
  };
  const whole = await client.chat.completions.create(params);
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(whole.choices[0].logprobs.content.length > 0);
  assert.equal(whole.choices[0].logprobs.content[0].top_logprobs.length, 2);
  let text = '';
  let usage = null;
  const stream = await client.chat.completions.create({
    ...params, stream: true, stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('errors surface as OpenAI API errors', async () => {
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 2, temperature: -3 }),
    (e) => e instanceof OpenAI.BadRequestError);
});
