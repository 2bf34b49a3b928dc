/** Everything the bench takes from src/, in one place, so that a move in src/ is one edit here. */

export { EnvSchema } from '../src/config.ts'
export { generateApiKey } from '../src/domain/api-keys.ts'
export { cursorCodec } from '../src/domain/pagination.ts'
export type { NewPet } from '../src/schemas/pets.ts'
export { openStore } from '../src/store/index.ts'
