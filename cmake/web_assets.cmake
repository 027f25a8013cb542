# web_assets.cmake — embeds the browser chat page (src/web/app) and the Debian-packaged
# JavaScript libraries it uses into libcinfer_core: tools/web_embed.c (a host tool built
# here) gzips each file into a generated C source with a table of paths, content types and
# ETags (src/web/web_assets.h). Nothing is fetched at build or run time. The libraries
# come from Debian 12's packages (scripts/deps.sh installs them; their licenses are in
# src/web/vendor/); the build stops with the package name when one is missing.
set(CINFER_WEB_JS "/usr/share/javascript" CACHE PATH "Debian's JavaScript library root")
set(CINFER_WEB_NODE "/usr/share/nodejs" CACHE PATH "Debian's Node.js module root")
set(_web_app ${CMAKE_SOURCE_DIR}/src/web/app)

# FLAGS:URLPATH=FILE (tools/web_embed.c): h = content-hashed name, t = names hashed ones
set(_web_libs
  "libjs-marked|h:/assets/marked.js=${CINFER_WEB_JS}/marked/marked.umd.min.js"
  "node-dompurify|h:/assets/purify.js=${CINFER_WEB_NODE}/dompurify/dist/purify.min.js"
  "libjs-highlight.js|h:/assets/highlight.js=${CINFER_WEB_JS}/highlight.js/highlight.min.js"
  "libjs-highlight.js|h:/assets/hl-light.css=${CINFER_WEB_JS}/highlight.js/styles/github.css"
  "libjs-highlight.js|h:/assets/hl-dark.css=${CINFER_WEB_JS}/highlight.js/styles/atom-one-dark.css"
  "libjs-katex|h:/assets/katex.js=${CINFER_WEB_JS}/katex/katex.js"
  "libjs-katex|h:/assets/katex.css=${CINFER_WEB_JS}/katex/katex.min.css")
set(_web_specs "")
set(_web_deps "")
set(_web_missing "")
foreach(l ${_web_libs})
  string(REPLACE "|" ";" parts "${l}")
  list(GET parts 0 pkg)
  list(GET parts 1 spec)
  string(REGEX REPLACE "^[^=]*=" "" file "${spec}")
  if(NOT EXISTS "${file}")
    list(APPEND _web_missing "${pkg} (${file})")
  endif()
  list(APPEND _web_specs "${spec}")
  list(APPEND _web_deps "${file}")
endforeach()
# KaTeX's fonts: the stylesheet names them relative to itself (fonts/...); browsers that
# read woff2 (all current ones) never ask for the woff/ttf fallbacks, so only woff2 is kept
file(GLOB _web_fonts "${CINFER_WEB_JS}/katex/fonts/*.woff2")
if(NOT _web_fonts)
  list(APPEND _web_missing "libjs-katex (${CINFER_WEB_JS}/katex/fonts/*.woff2)")
endif()
foreach(f ${_web_fonts})
  get_filename_component(n ${f} NAME)
  list(APPEND _web_specs "-:/assets/fonts/${n}=${f}")
  list(APPEND _web_deps "${f}")
endforeach()
if(_web_missing)
  list(REMOVE_DUPLICATES _web_missing)
  string(REPLACE ";" "\n  " _m "${_web_missing}")
  message(FATAL_ERROR "cinfer: the browser chat page embeds Debian's JavaScript packages, and "
    "these are missing:\n  ${_m}\nInstall them with scripts/deps.sh (apt-get install "
    "libjs-marked node-dompurify libjs-highlight.js libjs-katex).")
endif()
# the app's own files; index.html last: it names the hashed ones
file(GLOB _web_own CONFIGURE_DEPENDS ${_web_app}/*.js ${_web_app}/*.css ${_web_app}/*.svg)
foreach(f ${_web_own})
  get_filename_component(n ${f} NAME)
  list(APPEND _web_specs "h:/assets/${n}=${f}")
  list(APPEND _web_deps "${f}")
endforeach()
list(APPEND _web_specs "t:/index.html=${_web_app}/index.html")
list(APPEND _web_deps "${_web_app}/index.html")

add_executable(cinfer_web_embed ${CMAKE_SOURCE_DIR}/tools/web_embed.c)
target_compile_options(cinfer_web_embed PRIVATE ${CINFER_WARN})
target_link_libraries(cinfer_web_embed PRIVATE ZLIB::ZLIB)
set(_web_out ${CMAKE_BINARY_DIR}/generated/web_assets.c)
add_custom_command(OUTPUT ${_web_out}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/generated
  # a build tool: under a sanitizer build, what it does not free at exit is no finding
  COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=0 $<TARGET_FILE:cinfer_web_embed>
          ${_web_out} ${_web_specs}
  DEPENDS cinfer_web_embed ${_web_deps}
  COMMENT "Embedding the browser chat page")
target_sources(cinfer_core PRIVATE ${_web_out})
