// llama.cpp against itself: the same tokens teacher-forced through two models (or one model
// twice) with different batch sizes, e.g. one batch against one token per llama_decode.
// Used for docs/models.md's BF16 paragraph (llama.cpp's BF16 result moves with the batching).
//
//   node batching.mjs MODEL_A MODEL_B BATCH_A BATCH_B KV_TYPE
//   node batching.mjs tiny-bf16.gguf tiny-bf16.gguf 256 1 F32
//
// Prints the max |logprob difference| over each side's top-5 at 62 positions of a fixed
// pseudo-random 64-token sequence (ids 3..502: the `tiny` presets' vocabulary).
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [model_a, model_b, batch_a, batch_b, kv_type] = process.argv.slice(2);
if (!kv_type) throw new Error("usage: node batching.mjs MODEL_A MODEL_B BATCH_A BATCH_B F32|F16");
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error,
                              maxThreads: 1, usePrebuiltBinaries: true});
const tokens = [];
for (let i = 0, s = 12345; i < 64; ++i) {
  s = (s * 1103515245 + 12345) % 2147483648;
  tokens.push(3 + (s >> 8) % 500);
}

// The next-token probabilities after each of tokens[1 .. 62].
async function Distributions(path, batch) {
  const model = await llama.loadModel({modelPath: path, gpuLayers: 0});
  const context = await model.createContext({
    contextSize: 256, batchSize: Number(batch), threads: 1, flashAttention: false,
    experimentalKvCacheKeyType: kv_type, experimentalKvCacheValueType: kv_type});
  const input = tokens.map((t, i) => i >= 1 && i + 1 < tokens.length
      ? [t, {generateNext: {probabilities: true, options: {temperature: 0}}}] : t);
  const outputs = await context.getSequence().controlledEvaluate(input);
  const result = [];
  for (let i = 1; i + 1 < tokens.length; ++i) result.push(outputs[i].next.probabilities);
  await context.dispose();
  await model.dispose();
  return result;
}

// Max |log p - log q| over the 5 most likely tokens of `p` (both sides finite).
function MaxDiff(p, q) {
  let max = 0, k = 0;
  for (const [token, prob] of p) {
    if (k++ >= 5) break;
    const other = q.get(token);
    if (prob > 0 && other > 0) max = Math.max(max, Math.abs(Math.log(prob) - Math.log(other)));
  }
  return max;
}

const a = await Distributions(model_a, batch_a), b = await Distributions(model_b, batch_b);
let max = 0;
for (let i = 0; i < a.length; ++i) max = Math.max(max, MaxDiff(a[i], b[i]), MaxDiff(b[i], a[i]));
console.log(`${model_a} (batch ${batch_a}) vs ${model_b} (batch ${batch_b}), KV ${kv_type}: ` +
            `max |logprob difference| over the top-5 = ${max.toExponential(2)}`);
process.exit(0);
