// highlight.js ships types for its core but none for the per-language modules it exports
// (`highlight.js/lib/languages/<name>`): each is a LanguageFn as default export.
declare module 'highlight.js/lib/languages/*' {
  const language: import('highlight.js').LanguageFn;
  export default language;
}
