export { documentBody, parseDocument, serializeDocument, setFrontmatterFields, type ParsedDocument } from './frontmatter.js';
export {
  extractTitle,
  extractTags,
  extractLinks,
  extractSections,
  findSection,
  findSectionRange,
  type Link,
  type Section,
  type SectionRange,
} from './structure.js';
export {
  colonFencePlugin,
  FENCE_TOKEN,
  findSensitiveBlocks,
  maxBlockLevel,
  redactBlocks,
  redactDocument,
  REDACTED,
  type FenceMeta,
  type SensitiveBlock,
} from './blocks.js';
