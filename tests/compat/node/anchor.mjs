// llama.cpp as kvserve's anchor: the prebuilt CPU llama.cpp of node-llama-cpp@3.21.1 (installed
// here by scripts/test.sh), driven by small JSON jobs so the C++ compat suite
// (tests/compat/compat_test.cc) can compare kvserve against it.
//
//   node anchor.mjs logprobs JOB.json   teacher-forced next-token log-probabilities
//   node anchor.mjs tokenize JOB.json   model.tokenize of strings
//   node anchor.mjs info                the package and llama.cpp versions (JSON)
//
// Each command prints one JSON object on stdout; llama.cpp's own log goes to stderr (errors
// only). Exit status 0 on success, 1 with a message on stderr otherwise.
//
// logprobs job: {"model": PATH, "threads": N, "top_k": K, "kv_type": "F32"|"F16",
//                "flash_attention": bool, "sequences": [{"tokens": [ids], "first": P,
//                "lookup": [[ids], ...]}]}
//   For each sequence, for every position i in [P, tokens.length), the distribution of the
//   token at i given tokens[0..i) (teacher forcing: one controlledEvaluate over the whole
//   sequence). Output {"sequences": [{"positions": [{"top": [[id, logprob], ...],
//   "lookup": [[id, logprob], ...]}]}]}: the K most likely tokens, most likely first, and the
//   logprobs of the ids in lookup[i - P] (other tokens the caller wants to compare).
//
// What the numbers are: with temperature 0 node-llama-cpp's sampler chain is llama.cpp's
// greedy sampler alone, which picks a token and leaves every logit as the model computed it;
// the addon then returns softmax(logits) over the whole vocabulary in float32
// (AddonContext.cpp, SampleToken). So logprob = log of the raw model distribution, the same
// quantity kvserve's `generate --json` prints (sampling/sampler.h: "of the raw model
// distribution"). float32 probabilities underflow below e^-87 (normal range) and reach 0 at
// ~e^-103: such logprobs are reported as null (not measurable here).
//
// tokenize job: {"model": PATH, "texts": [strings], "special": bool}
//   The vocabulary alone is loaded (vocabOnly). Output {"ids": [[ids], ...]}: model.tokenize
//   (llama.cpp's common_tokenize with add_special = false: no BOS).
import {readFileSync} from "node:fs";
import {getLlama, getModuleVersion, LlamaLogLevel} from "node-llama-cpp";

const kMinMeasurableLogprob = -87.0;  // float32's smallest normal is ~e^-87.3

async function LoadLlama(threads) {
  return getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error,
                   maxThreads: threads ?? 0, usePrebuiltBinaries: true});
}

function Logprob(probability) {
  if (probability === undefined || probability <= 0) return null;
  const value = Math.log(probability);
  return value < kMinMeasurableLogprob ? null : value;
}

async function Logprobs(job) {
  const llama = await LoadLlama(job.threads);
  const model = await llama.loadModel({modelPath: job.model, gpuLayers: 0});
  const longest = Math.max(...job.sequences.map(s => s.tokens.length));
  const kv_type = job.kv_type ?? "F16";
  const context = await model.createContext({
    contextSize: Math.max(256, longest), batchSize: Math.max(256, longest),
    threads: job.threads ?? 0, flashAttention: job.flash_attention ?? false,
    experimentalKvCacheKeyType: kv_type, experimentalKvCacheValueType: kv_type});
  const sequence = context.getSequence();
  const top_k = job.top_k ?? 5;
  const result = {sequences: []};
  for (const s of job.sequences) {
    if (s.first < 1 || s.first > s.tokens.length) throw new Error(`bad first ${s.first}`);
    await sequence.clearHistory();
    const input = s.tokens.map((token, i) => i + 1 >= s.first && i + 1 < s.tokens.length
        ? [token, {generateNext: {probabilities: true, options: {temperature: 0}}}]
        : token);
    const outputs = await sequence.controlledEvaluate(input);
    const positions = [];
    for (let i = s.first; i < s.tokens.length; ++i) {
      const probabilities = outputs[i - 1]?.next?.probabilities;
      if (probabilities === undefined) throw new Error(`no probabilities at position ${i}`);
      const top = [];
      for (const [token, p] of probabilities) {  // sorted, most likely first
        if (top.length >= top_k) break;
        top.push([token, Logprob(p)]);
      }
      const lookup = (s.lookup?.[i - s.first] ?? []).map(t => [t, Logprob(probabilities.get(t))]);
      positions.push({top, lookup});
    }
    result.sequences.push({positions});
  }
  await context.dispose();
  await model.dispose();
  return result;
}

async function Tokenize(job) {
  const llama = await LoadLlama(1);
  const model = await llama.loadModel({modelPath: job.model, vocabOnly: true, gpuLayers: 0});
  const ids = job.texts.map(text => Array.from(model.tokenize(text, job.special ?? false)));
  await model.dispose();
  return {ids};
}

async function Info() {
  const llama = await LoadLlama(0);
  return {node_llama_cpp: await getModuleVersion(), llama_cpp: llama.llamaCppRelease,
          cpu_math_cores: llama.cpuMathCores, system_info: llama.systemInfo};
}

async function Main() {
  const [command, job_path] = process.argv.slice(2);
  const job = job_path ? JSON.parse(readFileSync(job_path, "utf8")) : {};
  let result;
  if (command === "logprobs") result = await Logprobs(job);
  else if (command === "tokenize") result = await Tokenize(job);
  else if (command === "info") result = await Info();
  else throw new Error("usage: node anchor.mjs logprobs|tokenize JOB.json | info");
  process.stdout.write(JSON.stringify(result) + "\n");
}

Main().then(() => process.exit(0), error => {
  process.stderr.write(`anchor.mjs: ${error?.stack ?? error}\n`);
  process.exit(1);
});
