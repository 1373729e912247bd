// llama.cpp's side of `kvserve bench compare` (tools/bench_compare.cc): one timed run on the
// prebuilt CPU llama.cpp of node-llama-cpp@3.21.1, set up as llama.cpp's own llama-bench sets
// itself up: the same thread count as kvserve, a context of exactly prompt + generated
// tokens, llama.cpp's default KV type (f16) and flash-attention setting (auto), and micro-batches
// of 512 tokens (llama-bench's n_ubatch; node-llama-cpp's default batchSize, which sets n_batch =
// n_ubatch).
//
//   node bench.mjs JOB.json
//   JOB: {"model": PATH, "threads": N, "sequences": S, "prompt_len": L, "gen": G, "seed": X,
//         "vocab": V}
//
// Each of the S sequences gets its own random prompt of L tokens (seeded, like kvserve bench
// throughput's), evaluated without sampling (timed: prefill), then generates G tokens with
// temperature 1 over the full vocabulary, all sequences in the same batches (timed: decode).
// Prints {"prefill_seconds", "prefill_tokens_per_s", "decode_seconds",
// "decode_tokens_per_s"} (decode: S * G tokens over the decode wall time; model loading and
// context creation are not timed), and llama.cpp's own account of the same work from its
// performance counters (llama_perf_context: time inside llama_decode only, as llama-bench
// counts it, without node-llama-cpp's per-token round trip from JavaScript or sampling):
// "own_prefill_tokens_per_s", "own_decode_tokens_per_s".
import {readFileSync} from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

// xorshift64*: a fixed random stream for the prompts.
function* Random(seed) {
  let x = BigInt.asUintN(64, BigInt(seed) * 0x9E3779B97F4A7C15n + 1n);
  for (;;) {
    x ^= x >> 12n; x ^= BigInt.asUintN(64, x << 25n); x ^= x >> 27n;
    yield Number(BigInt.asUintN(64, x * 0x2545F4914F6CDD1Dn) >> 11n) / 2 ** 53;
  }
}

function Prompt(random, length, vocab) {
  return Array.from({length}, () => Math.floor(random.next().value * vocab));
}

async function Generate(sequence, first_token, count, seed) {
  let generated = 0;
  const options = {temperature: 1, topK: 0, topP: 1, minP: 0, seed};
  for await (const token of sequence.evaluate([first_token], options)) {
    void token;
    if (++generated >= count) break;
  }
}

// Tokens per second inside llama_decode, both kinds of batches together. llama.cpp prints
// "0.00 ms / 1 runs" when there was no one-token batch: no token then.
function OwnRate(c) {
  const tokens = c.prompt_tokens + (c.eval_ms > 0 ? c.eval_runs : 0);
  return tokens / ((c.prompt_ms + c.eval_ms) / 1000);
}

async function Main() {
  const job = JSON.parse(readFileSync(process.argv[2], "utf8"));
  const perf_lines = [];
  const llama = await getLlama({
    gpu: false, build: "never", logLevel: LlamaLogLevel.info, maxThreads: job.threads,
    logger: (level, message) => {
      if (message.includes("llama_perf_context_print")) perf_lines.push(message);
      else if (level === LlamaLogLevel.error) process.stderr.write(message + "\n");
    }});
  // llama.cpp's counters since the last call (then reset): {tokens, ms} of the prompt-eval
  // (multi-token batches) and eval (one-token batches) kinds.
  const Counters = async context => {
    await context.printTimings();
    await new Promise(resolve => setTimeout(resolve, 50));  // the log arrives asynchronously
    const text = perf_lines.splice(0).join("\n");
    const prompt = /prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/.exec(text);
    const single = /:\s+eval time =\s*([\d.]+) ms \/\s*(\d+) runs/.exec(text);
    if (!prompt || !single) throw new Error("no llama_perf_context_print lines: " + text);
    return {prompt_ms: Number(prompt[1]), prompt_tokens: Number(prompt[2]),
            eval_ms: Number(single[1]), eval_runs: Number(single[2])};
  };
  const model = await llama.loadModel({modelPath: job.model, gpuLayers: 0});
  const sequences = job.sequences ?? 1;
  const per_sequence = job.prompt_len + job.gen + 1;  // llama-bench: n_prompt + n_gen
  const context = await model.createContext({
    contextSize: per_sequence, sequences, threads: job.threads, batchSize: 512,
    ignoreMemorySafetyChecks: true, performanceTracking: true});
  const vocab = job.vocab;
  const random = Random(job.seed ?? 0);
  const seqs = Array.from({length: sequences}, () => context.getSequence());
  const prompts = seqs.map(() => Prompt(random, job.prompt_len, vocab));

  let start = performance.now();
  await Promise.all(seqs.map((s, i) => s.evaluateWithoutGeneratingNewTokens(prompts[i])));
  const prefill_seconds = (performance.now() - start) / 1000;
  const prefill_counters = await Counters(context);

  start = performance.now();
  await Promise.all(seqs.map((s, i) => Generate(s, Prompt(random, 1, vocab)[0], job.gen,
                                                (job.seed ?? 0) + i)));
  const decode_seconds = (performance.now() - start) / 1000;
  const decode_counters = await Counters(context);
  process.stdout.write(JSON.stringify({
    prefill_seconds, prefill_tokens_per_s: sequences * job.prompt_len / prefill_seconds,
    decode_seconds, decode_tokens_per_s: sequences * job.gen / decode_seconds,
    own_prefill_tokens_per_s: OwnRate(prefill_counters),
    own_decode_tokens_per_s: OwnRate(decode_counters),
    context_size: context.contextSize}) + "\n");
  await context.dispose();
  await model.dispose();
}

Main().then(() => process.exit(0), error => {
  process.stderr.write(`bench.mjs: ${error?.stack ?? error}\n`);
  process.exit(1);
});
