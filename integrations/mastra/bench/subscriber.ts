/**
 * The benchmark's second process: `node subscriber.js URL TOPIC`. Prints `ready` once
 * subscribed, then, after the event whose data says `last`, one line: the JSON array of
 * publish → deliver delays in ms (same machine clock as the publisher).
 */

import { PostgresPubSub } from '../src/index.js';

const [url, topic] = process.argv.slice(2) as [string, string];
const now = (): number => performance.timeOrigin + performance.now();
const pubsub = new PostgresPubSub({ connectionString: url }, { cleanupIntervalMs: 0 });
const delays: number[] = [];
await pubsub.subscribe(topic, (event) => {
  const data = event.data as { sentAt: number; last: boolean };
  delays.push(now() - data.sentAt);
  if (data.last) process.stdout.write(`${JSON.stringify(delays)}\n`);
});
process.stdout.write('ready\n');
process.stdin.resume();
process.stdin.on('end', () => void pubsub.close().then(() => process.exit(0)));
