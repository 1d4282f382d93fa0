/**
 * One Mastra process for the real-runtime test: `node mastra-node.js URL NAME`.
 *
 * `new Mastra({ pubsub: new PostgresPubSub({ connectionString }), agents })` with a mock model
 * from `@mastra/core/test-utils/llm-mock`, and nothing else (no Redis, no other transport).
 * Driven by JSON lines on stdin, it answers with JSON lines on stdout:
 *
 * - `{"op":"send","id":…,"text":…,"resourceId":…,"threadId":…}`: `agent.sendMessage(...)`;
 *   answers `{"id":…,"action":…,"runId":…}` once the runtime decided. `"op":"queue"` does the
 *   same with `agent.queueMessage(...)` (a follow-up run after the active one).
 * - `{"op":"stream","id":…,"text":…,"resourceId":…,"threadId":…,"runId":…}`: `agent.stream(...)`
 *   with that run id on that thread; answers `{"id":…,"runId":…}` once the run is registered.
 * - `{"op":"finish"}`: lets every model call waiting in this process finish its stream.
 * - `{"op":"owner","key":…}`: answers `{"owner":…}` from the lease table.
 *
 * Unprompted lines: `{"event":"model-call","runId":…,"texts":[…]}` for each model call (the
 * user texts in its prompt), `{"event":"finished","runId":…,"text":…}` when a woken run's
 * output is complete.
 */

import { createInterface } from 'node:readline';

import { Agent } from '@mastra/core/agent';
import { Mastra } from '@mastra/core';
import { MastraLanguageModelV2Mock, simulateReadableStream } from '@mastra/core/test-utils/llm-mock';

import { PostgresPubSub } from '../../src/index.js';

const [url, name] = process.argv.slice(2) as [string, string];
const say = (line: object): void => {
  process.stdout.write(`${JSON.stringify(line)}\n`);
};

/** Model calls wait here until the test says `finish`. */
let gates: (() => void)[] = [];
let open = false;

function userTexts(prompt: unknown): string[] {
  const texts: string[] = [];
  for (const message of prompt as { role: string; content: unknown }[]) {
    if (message.role !== 'user' || !Array.isArray(message.content)) continue;
    for (const part of message.content as { type: string; text?: string }[]) {
      if (part.type === 'text' && typeof part.text === 'string') texts.push(part.text);
    }
  }
  return texts;
}

type DoStream = NonNullable<ConstructorParameters<typeof MastraLanguageModelV2Mock>[0]['doStream']>;

const model = new MastraLanguageModelV2Mock({
  doStream: (async (options: { prompt: unknown }) => {
    const texts = userTexts(options.prompt);
    say({ event: 'model-call', process: name, texts });
    if (!open) await new Promise<void>((resolve) => gates.push(resolve));
    return {
      stream: simulateReadableStream({
        chunks: [
          { type: 'stream-start', warnings: [] },
          { type: 'text-start', id: 't' },
          { type: 'text-delta', id: 't', delta: `reply from ${name} to ${texts.at(-1) ?? ''}` },
          { type: 'text-end', id: 't' },
          { type: 'finish', finishReason: 'stop', usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 } },
        ],
      }),
    };
  }) as DoStream,
});

// The mock's declared types come from @mastra/core's bundled ai-sdk copy, which TypeScript does
// not match with the Agent's model type under exactOptionalPropertyTypes; at run time it is a
// LanguageModelV2.
const agent = new Agent({ id: 'helper', name: 'helper', instructions: 'Answer briefly.', model: model as never });
const pubsub = new PostgresPubSub({ connectionString: url }, { pollIntervalMs: 500 });
await pubsub.ready();
const mastra = new Mastra({ pubsub, agents: { helper: agent }, logger: false });
const helper = mastra.getAgent('helper');

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  const command = JSON.parse(line) as {
    op: string;
    id?: number;
    text?: string;
    resourceId?: string;
    threadId?: string;
    runId?: string;
    key?: string;
    open?: boolean;
  };
  if (command.op === 'finish') {
    open = command.open === true;
    const waiting = gates;
    gates = [];
    for (const release of waiting) release();
    say({ id: command.id, done: true });
  } else if (command.op === 'owner') {
    pubsub.getLeaseOwner(command.key!).then((owner) => say({ id: command.id, owner: owner ?? null }));
  } else if (command.op === 'stream') {
    // A run started directly with a run id of the test's choosing (registered on its thread).
    const runId = command.runId!;
    helper.stream(command.text!, { runId, memory: { thread: command.threadId!, resource: command.resourceId! } }).then(
      (output) => {
        say({ id: command.id, runId: output.runId });
        output.text.then(
          (text) => say({ event: 'finished', process: name, runId, text }),
          (error: unknown) => say({ event: 'failed', process: name, runId, error: String(error) }),
        );
      },
      (error: unknown) => say({ id: command.id, error: String(error) }),
    );
  } else if (command.op === 'send' || command.op === 'queue') {
    const target = {
      resourceId: command.resourceId!,
      threadId: command.threadId!,
      ifActive: { behavior: 'deliver' as const },
      ifIdle: { behavior: 'wake' as const },
    };
    const result = command.op === 'send' ? helper.sendMessage(command.text!, target) : helper.queueMessage(command.text!, target);
    result.accepted.then(
      (accepted) => {
        const runId = 'runId' in accepted ? accepted.runId : undefined;
        say({ id: command.id, action: accepted.action, runId });
        if (accepted.action === 'wake') {
          accepted.output.text.then(
            (text) => say({ event: 'finished', process: name, runId, text }),
            (error: unknown) => say({ event: 'failed', process: name, runId, error: String(error) }),
          );
        }
      },
      (error: unknown) => say({ id: command.id, error: String(error) }),
    );
  }
});
lines.on('close', () => {
  void pubsub.close().then(() => process.exit(0));
});
say({ event: 'ready', process: name });
