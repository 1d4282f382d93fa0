/** A Mastra process of the real-runtime test (test/workers/mastra-node.ts), driven by JSON lines. */

import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const WORKER = fileURLToPath(new URL('./workers/mastra-node.js', import.meta.url));

export interface Line {
  id?: number;
  event?: string;
  process?: string;
  [field: string]: unknown;
}

export class MastraProcess {
  readonly name: string;
  readonly events: Line[] = [];
  readonly #child: ChildProcess;
  readonly #replies = new Map<number, (line: Line) => void>();
  readonly #watchers = new Set<() => void>();
  readonly #stderr: string[] = [];
  #serial = 0;
  #exited: Promise<number | null>;

  private constructor(url: string, name: string, env: Record<string, string>) {
    this.name = name;
    this.#child = spawn(process.execPath, [WORKER, url, name], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    this.#exited = new Promise((resolve) => this.#child.once('exit', (code) => resolve(code)));
    createInterface({ input: this.#child.stdout! }).on('line', (text) => {
      let line: Line;
      try {
        line = JSON.parse(text) as Line;
      } catch {
        return; // not ours (a library printing)
      }
      if (line.id !== undefined && this.#replies.has(line.id)) {
        this.#replies.get(line.id)!(line);
        this.#replies.delete(line.id);
      } else if (line.event !== undefined) {
        this.events.push(line);
        for (const watcher of [...this.#watchers]) watcher();
      }
    });
    createInterface({ input: this.#child.stderr! }).on('line', (text) => this.#stderr.push(text));
  }

  /** Start a process and wait for its `ready` line. */
  static async start(url: string, name: string, env: Record<string, string> = {}): Promise<MastraProcess> {
    const child = new MastraProcess(url, name, env);
    await child.waitFor('ready', (line) => line.event === 'ready', 30_000);
    return child;
  }

  request(command: Record<string, unknown>): Promise<Line> {
    const id = ++this.#serial;
    return new Promise((resolve) => {
      this.#replies.set(id, resolve);
      this.#child.stdin!.write(`${JSON.stringify({ ...command, id })}\n`);
    });
  }

  send(text: string, resourceId: string, threadId: string): Promise<Line> {
    return this.request({ op: 'send', text, resourceId, threadId });
  }

  queue(text: string, resourceId: string, threadId: string): Promise<Line> {
    return this.request({ op: 'queue', text, resourceId, threadId });
  }

  /** The first event (seen already or coming) that matches; fails after `ms` naming `what`. */
  waitFor(what: string, match: (line: Line) => boolean, ms = 30_000): Promise<Line> {
    return new Promise((resolve, reject) => {
      const check = (): boolean => {
        const found = this.events.find(match);
        if (found === undefined) return false;
        this.#watchers.delete(watcher);
        clearTimeout(timer);
        resolve(found);
        return true;
      };
      const watcher = (): void => void check();
      const timer = setTimeout(() => {
        this.#watchers.delete(watcher);
        reject(new Error(`${this.name}: timed out waiting for ${what}; stderr:\n${this.#stderr.slice(-20).join('\n')}`));
      }, ms);
      if (!check()) this.#watchers.add(watcher);
    });
  }

  kill(): void {
    this.#child.kill('SIGKILL');
  }

  async stop(): Promise<void> {
    this.#child.stdin!.end();
    const timer = setTimeout(() => this.#child.kill('SIGKILL'), 10_000);
    await this.#exited;
    clearTimeout(timer);
  }
}
