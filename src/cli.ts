/**
 * The operator's command line: accounts and API keys, on the same DATABASE_URL as the server.
 * Run as `npx animal-store <command>`; `backup` copies a SQLite database. Errors print one line to stderr and exit non-zero.
 */
import { createInterface } from 'node:readline'
import { Writable } from 'node:stream'
import { parseArgs } from 'node:util'
import { type Config, loadConfig } from './config.ts'
import {
  AccountRuleError,
  createAccount,
  DEFAULT_KEY_NAME,
  hashPassword,
  isEmail,
  isKeyName,
  isPassword,
  issueApiKey,
  KEY_NAME_DESCRIPTION,
  keyState,
  MAX_LIFETIME_DESCRIPTION,
  PASSWORD_DESCRIPTION,
  parseDuration,
} from './domain/accounts.ts'
import { isKeyId } from './domain/api-keys.ts'
import { parseScopes, SCOPES } from './domain/scopes.ts'
import { CONTROL_CHARACTERS, EMAIL_DESCRIPTION } from './schemas/accounts.ts'
import { DatabaseNotSetUpError, openStore, type Store } from './store/index.ts'

const HELP_INDENT = ' '.repeat(50)

/** listen's lines of the help; its code (src/listen.ts) is loaded only when it runs. */
const LISTEN_USAGE = `  listen --forward-to <url> [--events <types>] [--url <api>] [--api-key <key>] [--resume-after <event-id>]
                                                  Forward your account's events, as they happen, to a
                                                  receiver on this machine, signed as webhooks are, with the
                                                  secret it prints (experimental: the server needs
                                                  EXPERIMENTAL_FEATURES=webhooks). types: as the type of
                                                  GET /v1/events (order.*,message.created); api: default
                                                  $ANIMAL_STORE_URL, else http://127.0.0.1:$PORT; key:
                                                  default $API_KEY.
  listen --print-secret [--api-key <key>]         Print only the secret listen signs with, and exit.`
/** The scopes, comma-separated, in lines that fit the help's second column. */
const SCOPE_LIST = SCOPES.map((scope, i) => `${scope}${i < SCOPES.length - 1 ? ',' : ''}`)
  .reduce<string[]>((lines, scope) => {
    const last = lines.at(-1)
    if (last !== undefined && last.length + scope.length < 50) lines[lines.length - 1] = `${last} ${scope}`
    else lines.push(scope)
    return lines
  }, [])
  .join(`\n${HELP_INDENT}`)

const USAGE = `Usage: animal-store <command>

  accounts create <email> [--if-not-exists]       Create an account. With --if-not-exists, an account that
                                                  exists already is a success (exit 0), not a failure.
  accounts set-password <email>                   Set an account's portal password, read from standard
                                                  input (typed without echo, or piped); ends its sessions.
  keys create <email> [--name <name>] [--expires-in <duration>] [--scopes <scopes>]
                                                  Generate an API key (printed once, alone on the last line).
                                                  duration: a number and s, m, h, d or w, e.g. 30d;
                                                  at most ${MAX_LIFETIME_DESCRIPTION}.
                                                  scopes: comma-separated, of
                                                  ${SCOPE_LIST}
                                                  (write implies read); without it, every scope.
  keys list <email>                               List an account's keys (never the secret).
  keys revoke <key-id>                            Revoke a key.
  backup <file>                                   Copy the SQLite database to a new file, consistently,
                                                  while the service runs (PostgreSQL: use pg_dump).
${LISTEN_USAGE}
  help                                            Show this help.

Uses DATABASE_URL and DEPLOYMENT like the server (see docs/configuration.md); listen uses the API
(see docs/webhooks.md#listen-on-your-machine).
Exit status: 0 done, 1 failed (the reason on stderr), 2 the command line is wrong.`

/** Thrown for a command that cannot be done (no such account, bad password input): one line, exit 1. */
export class CliError extends Error {}

/**
 * Thrown for a command line that is wrong (an unknown command or option, an argument missing or
 * malformed): exit 2, as POSIX utilities do, so that a script can tell its own mistake from a failure.
 */
export class UsageError extends CliError {}

/** No command at all: the whole usage goes to stderr, and the exit is 2 (`help` asks for it: stdout, 0). */
class NoCommandError extends UsageError {
  constructor() {
    super(USAGE)
  }
}

/** Control characters, and the invisible ones that reorder or break a line (bidi controls, U+2028/9). */
const CONTROL = new RegExp(
  `[${CONTROL_CHARACTERS}\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069\\u2028\\u2029]`,
  'gu',
)

/**
 * Text as the CLI prints it: control characters and invisible bidi or line-separator characters as
 * JSON-style escapes (\u001b, \u202e), so that what was typed or stored (older rows may hold
 * them) can neither drive the terminal, nor forge a line, nor reorder what the operator reads.
 */
export function printable(text: string): string {
  return text.replace(CONTROL, (c) => `\\u${(c.codePointAt(0) as number).toString(16).padStart(4, '0')}`)
}

/** The stored scopes of `--scopes` (the rule is in domain/scopes.ts). */
function keyScopes(list: string): string {
  try {
    return parseScopes(list)
  } catch (error) {
    throw new UsageError(`--scopes: ${(error as Error).message}`)
  }
}

/** A key's scopes as the CLI prints them: comma-separated, as `--scopes` takes them (stored: space-separated). */
function shownScopes(scopes: string | null | undefined): string {
  return scopes?.replaceAll(' ', ',') ?? 'all'
}

/** The key lifetime of `--expires-in`, in milliseconds (the rule is in accounts.ts). */
function lifetime(text: string): number {
  try {
    return parseDuration(text)
  } catch (error) {
    if (error instanceof AccountRuleError) throw new UsageError(`--expires-in ${error.message}`)
    throw error
  }
}

function email(text: string | undefined): string {
  if (text === undefined) throw new UsageError('An email address is required. Run "animal-store help".')
  if (!isEmail(text)) throw new UsageError(`"${text}" is not ${EMAIL_DESCRIPTION}`)
  return text
}

function keyId(text: string | undefined): string {
  if (text === undefined) throw new UsageError('A key id (key_…) is required. See "animal-store keys list <email>".')
  if (!isKeyId(text)) {
    throw new UsageError(
      `"${text}" is not a key id (key_ and 16 letters or digits, as "animal-store keys list" shows).`,
    )
  }
  return text
}

const OPTIONS = {
  name: { type: 'string' },
  'expires-in': { type: 'string' },
  scopes: { type: 'string' },
  'if-not-exists': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const

function parse(argv: string[]) {
  try {
    return parseArgs({ args: argv, allowPositionals: true, strict: true, tokens: true, options: OPTIONS })
  } catch (error) {
    // parseArgs takes `--expires-in -1d` for a forgotten value ("ambiguous"); no duration starts
    // with a dash, so the duration's own rule says what is wrong with it.
    const at = argv.indexOf('--expires-in')
    const value = at >= 0 ? argv[at + 1] : undefined
    if ((error as { code?: string }).code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && value?.startsWith('-')) {
      lifetime(value)
    }
    throw error
  }
}

async function account(store: Store, address: string) {
  const found = await store.findAccountByEmail(address)
  if (!found) throw new CliError(`No account for ${address}; create it with: animal-store accounts create ${address}`)
  return found
}

/** Writes a line to standard output; resolves once it is written (rejects if it cannot be). */
type Print = (line: string) => void | Promise<void>

/** Standard input, and where its prompt goes (standard error). */
interface Input {
  stdin: NodeJS.ReadableStream & { isTTY?: boolean }
  prompts: NodeJS.WritableStream
}

/** Runs one command. */
async function run(argv: string[], config: Config, print: Print, input: Input): Promise<void> {
  const { positionals, values, tokens } = parse(argv)
  // parseArgs keeps the last of a repeated option: refuse it rather than guess which was meant.
  const given = new Set<string>()
  for (const token of tokens) {
    if (token.kind !== 'option') continue
    if (given.has(token.name)) throw new UsageError(`--${token.name} is given more than once.`)
    given.add(token.name)
  }
  const [group, action, arg, ...extra] = positionals
  if (values.help || group === 'help') return print(USAGE)
  if (group === undefined) throw new NoCommandError()
  if (extra.length > 0) throw new UsageError(`Unexpected argument "${extra[0]}". Run "animal-store help".`)
  if (group === 'backup') {
    if (arg !== undefined) throw new UsageError(`Unexpected argument "${arg}". Run "animal-store help".`)
    if (given.size > 0) throw new UsageError(`"backup" takes no options. Run "animal-store help".`)
    return backupCommand(action, config.databaseUrl, (line) => print(printable(line)))
  }
  const command = `${group} ${action ?? ''}`.trim()
  const known = ['accounts create', 'accounts set-password', 'keys create', 'keys list', 'keys revoke']
  const actions = known.filter((c) => c.startsWith(`${group} `)).map((c) => c.slice(group.length + 1))
  if (action === undefined && actions.length > 0) {
    throw new UsageError(`"${group}" needs one of: ${actions.join(', ')}. Run "animal-store help".`)
  }
  if (!known.includes(command)) throw new UsageError(`Unknown command "${command}". Run "animal-store help".`)
  if (
    command !== 'keys create' &&
    (values.name !== undefined || values['expires-in'] !== undefined || values.scopes !== undefined)
  ) {
    throw new UsageError(`--name, --expires-in and --scopes apply only to "keys create".`)
  }
  if (command !== 'accounts create' && values['if-not-exists'] !== undefined) {
    throw new UsageError(`--if-not-exists applies only to "accounts create".`)
  }
  // Check the arguments before touching the database.
  const revoking = command === 'keys revoke'
  const address = revoking ? undefined : email(arg)
  const id = revoking ? keyId(arg) : undefined
  const lifetimeMs = values['expires-in'] === undefined ? undefined : lifetime(values['expires-in'])
  const name = values.name ?? DEFAULT_KEY_NAME
  const scopes = values.scopes === undefined ? null : keyScopes(values.scopes)
  if (!isKeyName(name)) throw new UsageError(`--name must be ${KEY_NAME_DESCRIPTION}`)
  const password = command === 'accounts set-password' ? await readPassword(input) : undefined
  const say: Print = (line) => print(printable(line))

  // Only "accounts create" may set up a database: the others need an account or a key in it, and a
  // mistyped DATABASE_URL must not leave an empty database (a file, its folders, tables) behind.
  const existing = command !== 'accounts create'
  // One statement or two, then the process ends: written directly, with no writer thread (SQLite).
  const options = {
    databaseUrl: config.databaseUrl,
    poolSize: 2,
    timeoutMs: config.databaseTimeoutMs,
    existing,
    direct: true,
  }
  const store = await openStore(options).catch((error) => {
    if (!(error instanceof DatabaseNotSetUpError)) throw error
    throw new CliError(`${error.message} (only "accounts create" sets up a new one).`)
  })
  try {
    switch (command) {
      case 'accounts create': {
        const created = await createAccount(store, address as string)
        if (created) return say(`Created account ${created.id} for ${created.email}.`)
        // As SQL's CREATE … IF NOT EXISTS: a script run twice (a quickstart under `set -e`) goes on.
        if (values['if-not-exists']) return say(`An account for ${address} already exists; nothing to do.`)
        throw new CliError(`An account for ${address} already exists (--if-not-exists makes that a success).`)
      }
      case 'accounts set-password': {
        const owner = await account(store, address as string)
        await store.setAccountPassword(owner.id, await hashPassword(password as string))
        return say(`Set the password of ${owner.email}; any portal sessions it had are ended.`)
      }
      case 'keys create': {
        const owner = await account(store, address as string)
        const request = { accountId: owner.id, name, lifetimeMs, scopes }
        const { key, secret } = await issueApiKey(store, config.deployment, request)
        say(
          `Created ${config.deployment} key ${key.id} "${key.name}" for ${owner.email}, ${key.expiresAt ? `expires ${key.expiresAt}` : 'no expiry'}, scopes: ${shownScopes(key.scopes)}.`,
        )
        // Each deployment refuses the other's keys: say so where the operator may have forgotten.
        if (config.deployment === 'staging')
          say('A production server refuses it: DEPLOYMENT=production makes a production key.')
        say('Copy it now: it is shown only this once.')
        try {
          await say(secret)
        } catch {
          // Nobody got the secret (the reader of standard output went away): a key no one holds must not stay active.
          await store.revokeApiKey(key.id)
          throw new CliError(`Could not write the new key to standard output, so key ${key.id} was revoked.`)
        }
        return
      }
      case 'keys list': {
        const owner = await account(store, address as string)
        const keys = await store.listApiKeys(owner.id)
        if (keys.length === 0) return say(`${owner.email} has no keys.`)
        const rows = keys.map((k) => [
          k.id,
          k.name,
          `${k.prefix}…`,
          keyState(k),
          k.createdAt,
          k.expiresAt ?? '-',
          k.lastUsedAt ?? '-',
          shownScopes(k.scopes),
        ])
        return printTable(['ID', 'NAME', 'PREFIX', 'STATE', 'CREATED', 'EXPIRES', 'LAST USED', 'SCOPES'], rows, print)
      }
      case 'keys revoke': {
        const key = await store.revokeApiKey(id as string)
        if (!key) throw new CliError(`No key with id "${id}".`)
        // Revoking again keeps the first time: say since when, true whether it was now or before.
        await say(`Key ${key.id} (${key.prefix}…) is revoked, since ${key.revokedAt}.`)
        // Running servers check keys through a cache: say for how long one may still take it.
        return say(
          `Running servers refuse it within their API_KEY_CACHE_SECONDS (${config.apiKeyCacheMs / 1000} s here), and end its event streams a second later.`,
        )
      }
    }
  } finally {
    await store.close()
  }
}

/** `backup <file>`: SQLite's online backup of DATABASE_URL to a new file; PostgreSQL has its own tool. */
async function backupCommand(target: string | undefined, databaseUrl: string, say: Print): Promise<void> {
  if (target === undefined || target === '') {
    throw new UsageError('A file to write the backup to is required. Run "animal-store help".')
  }
  if (!databaseUrl.startsWith('sqlite:')) {
    // Never the password: this line ends up in terminals and logs.
    const url = new URL(databaseUrl)
    url.password = ''
    throw new CliError(
      `"backup" copies SQLite databases; back up PostgreSQL with pg_dump: pg_dump --format=custom --file=${shellQuote(target)} ${shellQuote(url.href)}`,
    )
  }
  // Not the store (nor its writer's modules): a copy needs the file's path and node:sqlite.
  const { sqlitePath } = await import('./store/sqlite-file.ts')
  const { backupSqlite, BackupTargetError } = await import('./store/sqlite-backup.ts')
  const source = sqlitePath(databaseUrl)
  const started = performance.now()
  try {
    const { pages, bytes } = await backupSqlite(source, target)
    const seconds = ((performance.now() - started) / 1000).toFixed(1)
    await say(`Backed up ${source} to ${target}: ${pages} pages, ${bytes} bytes, in ${seconds} s.`)
  } catch (error) {
    if (error instanceof BackupTargetError || error instanceof DatabaseNotSetUpError) {
      throw new CliError(error.message)
    }
    throw error
  }
}

/** `text` as one shell word, quoted only when it needs to be. */
function shellQuote(text: string): string {
  return /^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`
}

/** More than any password the rule takes (256 characters of up to 2 UTF-16 units) can be: input past it is not read. */
const MAX_PASSWORD_INPUT = 4096

/** The new password: one line, checked against the portal's rule before anything is stored. */
async function readPassword({ stdin, prompts }: Input): Promise<string> {
  const password = await readStdin('New password: ', stdin, prompts)
  // Bytes that are not UTF-8 (a terminal in Latin-1) arrive as U+FFFD: stored so, the password the
  // owner types in a browser would never match, and any other such bytes would.
  if (password.includes('\uFFFD')) {
    throw new CliError("The password is not UTF-8 text (check the terminal's encoding); no password was set.")
  }
  if (!isPassword(password)) throw new CliError(`The password must be ${PASSWORD_DESCRIPTION}.`)
  return password
}

/**
 * The first line of `input` (standard input). At a terminal it is typed after a prompt (on
 * `prompts`, stderr) and not echoed; otherwise it is piped, e.g.
 * `printf '%s' "$PASSWORD" | animal-store accounts set-password …`, so that it never appears in
 * the command line (shell history, `ps`). Exported for the tests, which type into a fake terminal.
 */
export async function readStdin(
  prompt: string,
  input: NodeJS.ReadableStream & { isTTY?: boolean } = process.stdin,
  prompts: NodeJS.WritableStream = process.stderr,
): Promise<string> {
  const terminal = input.isTTY === true
  if (!terminal) return firstLine(input)
  prompts.write(prompt)
  // At a terminal, readline echoes what is typed to its output: give it one that shows nothing.
  const silent = new Writable({ write: (_chunk, _encoding, done) => done() })
  const lines = createInterface({ input, output: silent, terminal })
  // In raw mode Ctrl-C reaches readline, not the process: end the prompt with it.
  let cancelled = false
  lines.on('SIGINT', () => {
    cancelled = true
    lines.close()
  })
  try {
    for await (const line of lines) return line
    if (cancelled) throw new CliError('Cancelled: no password was set.')
    return ''
  } finally {
    lines.close()
    prompts.write('\n')
  }
}

/** The first line of piped input, read no further than MAX_PASSWORD_INPUT characters. */
async function firstLine(input: NodeJS.ReadableStream): Promise<string> {
  input.setEncoding('utf8')
  let text = ''
  for await (const chunk of input) {
    text += chunk
    const end = text.search(/[\r\n]/)
    if (end >= 0) return text.slice(0, end)
    if (text.length > MAX_PASSWORD_INPUT) throw new CliError(`The password must be ${PASSWORD_DESCRIPTION}.`)
  }
  return text
}

/** Prints a table of `cells`, escaped (printable) before measuring, so that the columns line up as printed. */
function printTable(header: string[], cells: string[][], print: Print): void {
  const rows = cells.map((row) => row.map(printable))
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] as string).length)))
  for (const row of [header, ...rows])
    print(
      row
        .map((cell, i) => cell.padEnd(widths[i] as number))
        .join('  ')
        .trimEnd(),
    )
}

/** parseArgs's error in one line, with the way to help; an unknown option in the words of the other bad input. */
function parseErrorLine(error: Error & { code: string }): string {
  const option = /^Unknown option '(.*?)'\./.exec(error.message)?.[1]
  if (error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option !== undefined) {
    return `Unknown option "${option}". Run "animal-store help".`
  }
  const message = error.message.split('\n').join(' ').trimEnd()
  // Some of its messages end their sentence ("… is ambiguous."), others not ("… argument missing").
  return `${message}${/[.?!]$/.test(message) ? '' : '.'} Run "animal-store help".`
}

/** What a run reads and writes: the process's environment and standard streams, unless others are given (the tests). */
export interface Io {
  /** The variables, read through loadConfig (config.ts) like the server's. */
  env?: Record<string, string | undefined>
  stdin?: NodeJS.ReadableStream & { isTTY?: boolean }
  stdout?: NodeJS.WritableStream
  stderr?: NodeJS.WritableStream
  /** Ends a command that runs until stopped (listen), as Ctrl-C and SIGTERM do by default. */
  signal?: AbortSignal
}

/**
 * Runs `animal-store <argv>` and resolves with its exit status (it never rejects): the entry point
 * of bin/animal-store.ts, and of the tests, which run most commands in their own process.
 */
export async function main(argv: string[], io: Io = {}): Promise<number> {
  const { stdin = process.stdin, stdout = process.stdout, stderr = process.stderr } = io
  try {
    // A reader that went away (`| head -1`) is reported by each write's callback, not as an uncaught 'error'.
    stdout.on('error', () => {})
    const print = (line: string) => {
      const written = new Promise<void>((resolve, reject) => {
        stdout.write(`${line}\n`, (error) => (error ? reject(error) : resolve()))
      })
      // Lines nobody awaits are not unhandled rejections; the one that matters (a new key) is awaited.
      written.catch(() => {})
      return written
    }
    if (argv[0] === 'listen') {
      if (argv.slice(1).some((arg) => arg === '--help' || arg === '-h')) {
        await print(`Usage: animal-store listen …\n${LISTEN_USAGE}\nMore: docs/webhooks.md, "Listen on your machine".`)
        return 0
      }
      const { listen } = await import('./listen.ts')
      await untilStopped(io.signal, (signal) =>
        listen(argv.slice(1), loadConfig(io.env), { env: io.env, print, signal }),
      )
      return 0
    }
    await run(argv, loadConfig(io.env), print, { stdin, prompts: stderr })
    return 0
  } catch (error) {
    // The reader went away (`| head -1`, `| true`): what was done is done, and there is no one to
    // tell (a new key nobody received was revoked above, and said so).
    if ((error as { code?: string }).code === 'EPIPE') return 0
    if (error instanceof NoCommandError) {
      stderr.write(`${USAGE}\n`)
      return 2
    }
    const parseError = (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
    const known = error instanceof CliError || parseError || (error as Error).name === 'ConfigError'
    const message = error instanceof Error ? error.message : String(error)
    // parseArgs spreads its advice over several lines: keep it, on one. Anything else that is not
    // one line (typed or stored text, an unexpected error) has its line breaks escaped.
    const line = printable(parseError ? parseErrorLine(error as Error & { code: string }) : message)
    stderr.write(`animal-store: ${known ? line : `failed: ${line}`}\n`)
    return error instanceof UsageError || parseError ? 2 : 1
  }
}

/** Runs `command` until it ends or `signal` aborts; without a signal, until Ctrl-C or SIGTERM (then the exit is 0). */
async function untilStopped(signal: AbortSignal | undefined, command: (signal: AbortSignal) => Promise<void>) {
  if (signal) return command(signal)
  const stop = new AbortController()
  const abort = () => stop.abort()
  process.once('SIGINT', abort).once('SIGTERM', abort)
  try {
    await command(stop.signal)
  } finally {
    process.off('SIGINT', abort).off('SIGTERM', abort)
  }
}
