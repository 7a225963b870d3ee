# Included into llama.cpp's top-level project by scripts/build_llama_cpp.sh (CMAKE_PROJECT_INCLUDE), to shorten its
# compile without touching what computes. Measured on 2 cores (docs/testing.md): ggml and ggml-cpu, where every
# matrix multiply and kernel runs, are about 8% of the compile; the other 92% is the server, its HTTP library, the
# argument/chat/JSON code in common, the model loader and graph builders in libllama, and libmtmd (images and audio,
# which the serving tests never load).
#   - Those targets compile at -O1 instead of Release's -O3. A target's COMPILE_OPTIONS come after
#     CMAKE_CXX_FLAGS_RELEASE on the command line, and GCC takes the last -O, so ggml keeps -O3 and these get -O1.
#   - Many small files that each parse the same headers compile as a few unity files, as llama.cpp already does
#     for its own src/models: libmtmd's model graphs and common's chat parsers (checked free of clashing names).
# The file's text is part of the build key, so a change here never reuses an older build.
if(NOT PROJECT_NAME STREQUAL "llama.cpp")
  return()  # included after every project(); ggml's own is left as it is
endif()

function(ile_unity target batch dir keep_regex)
  get_target_property(srcs ${target} SOURCES)
  foreach(s IN LISTS srcs)
    if(NOT IS_ABSOLUTE "${s}")
      set(s "${dir}/${s}")
    endif()
    if(NOT s MATCHES "${keep_regex}")
      set_source_files_properties("${s}" DIRECTORY "${dir}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${batch})
endfunction()

function(ile_tune)
  foreach(t llama llama-common server-context llama-server-impl cpp-httplib mtmd)
    set_property(TARGET ${t} APPEND PROPERTY COMPILE_OPTIONS -O1)
  endforeach()
  ile_unity(mtmd 16 "${CMAKE_SOURCE_DIR}/tools/mtmd" "/tools/mtmd/models/[^/]+\\.cpp$")
  ile_unity(llama-common 8 "${CMAKE_SOURCE_DIR}/common" "/common/parsers/[^/]+\\.cpp$")
endfunction()
cmake_language(DEFER CALL ile_tune)
