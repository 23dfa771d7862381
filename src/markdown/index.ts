export { documentBody, parseDocument, serializeDocument, setFrontmatterFields, type ParsedDocument } from './frontmatter.js';
export { extractTitle, extractTags, extractLinks, extractSections, findSection, type Link, type Section } from './structure.js';
export { findSensitiveBlocks, maxBlockLevel, redactBlocks, redactDocument, REDACTED, type SensitiveBlock } from './blocks.js';
