"""The Python object model: Binary -> Container -> Image -> Kernel.

Everything is a view over the memory-mapped file. Opening a binary reads only
headers; an image is decompressed when its bytes or kernels are first asked for.

A Binary is a context manager: `with kir.open("app") as binary: ...` closes it at
the end (`binary.close()` does the same). Closing drops kir's references to the
mapping, which is unmapped once no Image or Container taken from it is left;
reading through the closed Binary, or through its Images, then raises KirError.
What was read before (kernels, bytes) stays valid.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

from kir import _core
from kir.errors import KirError
from kir.model import ImageKind, TargetKind


def kernel_static_hash(code, kernel: str) -> _core.Hash128:
    """The static hash of `kernel` (mangled) in decoded device code (`image.code`, a
    kir._core.DeviceCode), under libkir's one policy (docs/hashing.md). KirError, saying
    which, when the code holds no such kernel or was decoded without the image's digest
    that an image-hashed kernel needs (Binary.load_code(..., digests=True); image.code
    always has it) — never a silent None."""
    if not any(k.name == kernel for k in code.kernels):  # the core would hash any name with the image
        raise KirError(f"no kernel {kernel!r} in this code (it has {len(code.kernels)}: "
                       f"{', '.join(k.name for k in code.kernels[:3])}{', ...' if len(code.kernels) > 3 else ''})")
    found = _core.kernel_static_hash(code, kernel)
    if found is not None:
        return found
    raise KirError(f"kernel {kernel!r} is hashed from its image, whose digest was not computed: decode it with "
                   "Binary.load_code(images, digests=True), or use image.code / image.static_hash(name)")


class Image:
    """One device image or embedded module: a cubin, PTX, LTO-IR, an AMDGPU code
    object, LLVM bitcode... whatever container (CUDA fatbin, offload bundle) holds it."""

    def __init__(self, container: "Container", core: _core.Image, index: int) -> None:
        self.container = container
        self.core = core  #: the core's record (kir._core.Image)
        self.index = index  #: position among all images of the binary
        self._code: _core.DeviceCode | None = None

    @property
    def kind(self) -> ImageKind:
        """ImageKind.cubin, .ptx, .lto_ir, .old_cubin, .code_object, .bitcode, .host, ...
        (a str enum: equal to 'cubin', 'ptx', 'lto-ir', ...)."""
        return self.core.kind

    @property
    def target_kind(self) -> TargetKind:
        """The target's family: TargetKind.cuda ('sm_90'), .amdgpu ('gfx90a'), .none ('')."""
        return self.core.target_kind

    @property
    def target(self) -> str:
        """Target processor: 'sm_90', 'gfx90a:xnack+', or '' (host entries)."""
        return self.core.target

    arch = target

    @property
    def triple(self) -> str:
        """Target triple: 'nvptx64-nvidia-cuda', 'amdgcn-amd-amdhsa-', '' when unknown."""
        return self.core.triple

    @property
    def entry(self) -> _core.FatbinEntry | None:
        """CUDA images: the fatbin entry's header fields; None for other containers."""
        return self.core.fatbin

    @property
    def version(self) -> tuple[int, int] | None:
        """CUDA: (major, minor) code version, as cuobjdump prints it."""
        entry = self.core.fatbin
        return None if entry is None else (entry.major, entry.minor)

    @property
    def compression(self) -> str:
        """'none', 'lz4', 'zstd' or 'unknown'."""
        return self.core.compression

    @property
    def size(self) -> int:
        """Size of the image once decoded."""
        return self.core.size

    @property
    def stored_size(self) -> int:
        """Bytes stored in the file (the compressed size when compressed)."""
        return self.core.stored_size

    @property
    def file_offset(self) -> int | None:
        """Offset of the stored bytes in the file (None when not stored there as is)."""
        return self.core.file_offset

    @property
    def identifier(self) -> str:
        """The bundle entry id, or the CUDA entry's identifier."""
        return self.core.id

    @property
    def obfuscated(self) -> bool:
        """Obfuscated LTO-IR cannot be decoded without NVIDIA's key."""
        entry = self.core.fatbin
        return entry is not None and entry.obfuscated

    def read(self) -> bytes:
        """The image bytes, decoded."""
        self.container.binary._check_open()
        return self.core.read()

    @property
    def code(self) -> _core.DeviceCode:
        """Kernels, functions and globals (decoded on first use, then cached), with the
        decoded image's digest, so that kir.hashing.kernel_static_hash(image.code, name)
        has what it hashes."""
        if self._code is None or self._code.image_digest is None:
            core = self.container.binary._check_open()
            [code] = core.device_code_of([(self.container.index, self.core.index)], 1, None, True)
            if isinstance(code, str):  # the batch call gives the message; the single one raises it typed
                core.device_code(self.container.index, self.core.index)
                raise KirError(code)
            self._code = code
        return self._code

    def static_hash(self, kernel: str) -> str:
        """The static hash (32 hex digits) of the kernel named `kernel` (mangled) in this
        image, as `kir hash` prints it; KirError when the image holds no such kernel."""
        return kernel_static_hash(self.code, kernel).hex

    @property
    def kernels(self) -> list[_core.Kernel]:
        """The image's kernels (kir._core.Kernel: name, parameters' layout, resources):
        `code.kernels`."""
        return self.code.kernels

    def __repr__(self) -> str:
        return f"<kir.Image #{self.index} {self.kind} {self.target or '-'} {self.size} bytes>"


class Container:
    """A container (CUDA fatbin, offload bundle): where it lies and the images it holds."""

    def __init__(self, binary: "Binary", site: _core.Container, index: int, first_image: int) -> None:
        self.binary = binary
        self.site = site  #: the raw container record (kir._core.Container)
        self.index = index
        self.images = [Image(self, e, first_image + i) for i, e in enumerate(site.images)]

    @property
    def section(self) -> str:
        """Name of the ELF section holding it ('' when none)."""
        return self.site.section

    @property
    def member(self) -> str:
        """Archive member name ('' outside archives)."""
        return self.site.member

    @property
    def file_offset(self) -> int:
        """Offset of the container in the file."""
        return self.site.file_offset

    @property
    def size(self) -> int:
        """Bytes of the container in the file."""
        return self.site.size

    @property
    def format(self) -> str:
        """'cuda-fatbin', 'offload-bundle' or 'object-bundle'."""
        return self.site.format

    @property
    def found_by(self) -> str:
        """'section', 'wrapper' or 'scan'."""
        return self.site.found_by

    def __repr__(self) -> str:
        where = f"{self.member}:" if self.member else ""
        return (f"<kir.Container #{self.index} {self.format} {where}{self.section or '-'}@{self.file_offset:#x} "
                f"{len(self.images)} images>")


class Binary:
    """Every device-code container of one file (ELF, ar archive, bare fatbin or bundle)."""

    def __init__(self, core: _core.Binary) -> None:
        self._core: _core.Binary | None = core
        self._path, self._format = core.path, core.format  # for repr() and messages once closed
        self._containers: list[Container] | None = None
        self._wrappers: list[_core.FatbinWrapper] | None = None

    def _check_open(self) -> _core.Binary:
        if self._core is None:
            raise KirError(f"{self._path}: the binary is closed (kir.Binary.close)")
        return self._core

    @property
    def closed(self) -> bool:
        """Whether `close` was called (reading through it then raises KirError)."""
        return self._core is None

    def close(self) -> None:
        """Drop kir's references to the mapped file: it is unmapped once no Image or
        Container taken from this Binary is left. Reading through it (or them) then
        raises KirError. Closing twice is allowed."""
        self._core = None
        self._containers = None
        self._wrappers = None

    def __enter__(self) -> "Binary":
        self._check_open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._core is None:
            return f"<kir.Binary {self._path!r} {self._format} (closed)>"
        images = sum(len(site.images) for site in self._core.containers)
        return (f"<kir.Binary {self._path!r} {self._format}, {len(self._core.containers)} containers, "
                f"{images} images>")

    @property
    def wrappers(self) -> list[_core.FatbinWrapper]:
        """The .nvFatBinSegment wrappers (built on first use)."""
        if self._wrappers is None:
            self._wrappers = self._check_open().wrappers
        return self._wrappers

    @property
    def containers(self) -> list[Container]:
        """The fatbin containers, in file order (built on first use)."""
        if self._containers is None:
            core = self._check_open()
            self._containers = []
            count = 0
            for i, site in enumerate(core.containers):
                container = Container(self, site, i, count)
                self._containers.append(container)
                count += len(container.images)
        return self._containers

    @classmethod
    def open(cls, path: str, scan: bool = False, scan_data: bool = True) -> "Binary":
        """Map and index `path`. With `scan`, also find containers of every format by magic in
        every section. `scan_data` (the default) finds CUDA fatbins by magic in an ELF's data
        sections (.rodata, .data, .ldata, ...), where libraries such as cuFFT embed them;
        False reads only what sections and wrappers name."""
        return cls(_core.Binary.open(str(path), scan, scan_data))

    @property
    def path(self) -> str:
        """The file's path, as given to `open`."""
        return self._path

    @property
    def format(self) -> str:
        """'elf', 'archive', 'fatbin' or 'offload-bundle'."""
        return self._format

    @property
    def members(self) -> list[str]:
        """Archive member names."""
        return self._check_open().members

    @property
    def images(self) -> list[Image]:
        """Every image of every container, in file order (`Image.index` is the position)."""
        return [image for c in self.containers for image in c.images]

    def __iter__(self) -> Iterator[Image]:
        return iter(self.images)

    def load_code(self, images: list[Image] | None = None, threads: int = 0,
                  progress: Callable[[int, int], None] | None = None,
                  digests: bool = False) -> list[str]:
        """Decode the kernels of `images` (default: all) in parallel (`threads` 0 = all cores).

        Returns the error messages of images that could not be decoded; the
        others have their `code` filled in (with `digests`, also the decoded
        image's XXH3-128, `code.image_digest`).
        """
        images = self.images if images is None else images
        core = self._check_open()
        refs = [(image.container.index, image.core.index) for image in images]
        results = core.device_code_of(refs, threads, progress, digests)
        errors = []
        for image, result in zip(images, results):
            if isinstance(result, str):
                errors.append(result)
            else:
                image._code = result
        return errors


def elf_sections(data: bytes) -> list[tuple]:
    """The section table of an ELF image in memory (a decoded cubin: Image.read()) as
    kir's ELF reader reads it: (index, name, type, flags, addr, offset, size, link,
    info, addralign, entsize) per section. KirError when it is no valid ELF."""
    return _core.ElfFile.from_bytes(data).sections()


def open(path: str, scan: bool = False, scan_data: bool = True) -> Binary:  # noqa: A001 - the natural verb
    """Open a binary: `kir.open("app")`. Raises KirError on unreadable input."""
    return Binary.open(path, scan=scan, scan_data=scan_data)


__all__ = ["Binary", "Container", "elf_sections", "Image", "KirError", "kernel_static_hash", "open"]
