"""The Python object model: Binary -> Container -> Image -> Kernel.

Everything is a view over the memory-mapped file. Opening a binary reads only
headers; an image is decompressed when its bytes or kernels are first asked for.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

from kir import _core
from kir.errors import KirError


class Image:
    """One device image (a fatbin entry): a cubin, PTX text or LTO-IR."""

    def __init__(self, container: "Container", entry: _core.FatbinEntry, index: int) -> None:
        self.container = container
        self.entry = entry  #: the raw header fields (kir._core.FatbinEntry)
        self.index = index  #: position among all images of the binary
        self._code: _core.DeviceCode | None = None

    @property
    def kind(self) -> str:
        """'cubin', 'ptx', 'lto-ir', 'old-cubin' or 'unknown-N'."""
        return self.entry.kind_name

    @property
    def arch(self) -> str:
        """Target architecture, e.g. 'sm_90'."""
        return f"sm_{self.entry.arch}"

    @property
    def version(self) -> tuple[int, int]:
        """(major, minor) code version, as cuobjdump prints it."""
        return (self.entry.major, self.entry.minor)

    @property
    def compression(self) -> str:
        """'none', 'lz4', 'zstd' or 'unknown'."""
        return self.entry.compression

    @property
    def size(self) -> int:
        """Size of the image once decompressed."""
        return self.entry.image_size

    @property
    def stored_size(self) -> int:
        """Bytes stored in the file (the compressed size when compressed)."""
        return self.entry.stored_size

    @property
    def identifier(self) -> str:
        return self.entry.identifier

    @property
    def obfuscated(self) -> bool:
        """Obfuscated LTO-IR cannot be decoded without NVIDIA's key."""
        return self.entry.obfuscated

    def read(self) -> bytes:
        """The image bytes, decompressed."""
        return self.entry.read()

    @property
    def code(self) -> _core.DeviceCode:
        """Kernels, functions and globals (decoded on first use, then cached)."""
        if self._code is None:
            binary = self.container.binary
            self._code = binary._core.device_code(self.container.index, self.entry.index)
        return self._code

    @property
    def kernels(self) -> list[_core.Kernel]:
        return self.code.kernels

    def __repr__(self) -> str:
        return f"<kir.Image #{self.index} {self.kind} {self.arch} {self.size} bytes>"


class Container:
    """A fatbin container: where it lies and the images it holds."""

    def __init__(self, binary: "Binary", site: _core.Container, index: int, first_image: int) -> None:
        self.binary = binary
        self.site = site  #: the raw container record (kir._core.Container)
        self.index = index
        self.images = [Image(self, e, first_image + i) for i, e in enumerate(site.entries)]

    @property
    def section(self) -> str:
        return self.site.section

    @property
    def member(self) -> str:
        """Archive member name ('' outside archives)."""
        return self.site.member

    @property
    def file_offset(self) -> int:
        return self.site.file_offset

    @property
    def size(self) -> int:
        return self.site.total_size

    @property
    def found_by(self) -> str:
        """'section', 'wrapper' or 'scan'."""
        return self.site.found_by

    def __repr__(self) -> str:
        return f"<kir.Container #{self.index} {self.section}@{self.file_offset:#x}>"


class Binary:
    """Every device-code container of one file (ELF, ar archive or bare fatbin)."""

    def __init__(self, core: _core.Binary) -> None:
        self._core = core
        self._containers: list[Container] | None = None
        self._wrappers: list[_core.FatbinWrapper] | None = None

    @property
    def wrappers(self) -> list[_core.FatbinWrapper]:
        """The .nvFatBinSegment wrappers (built on first use)."""
        if self._wrappers is None:
            self._wrappers = self._core.wrappers
        return self._wrappers

    @property
    def containers(self) -> list[Container]:
        """The fatbin containers, in file order (built on first use)."""
        if self._containers is None:
            self._containers = []
            count = 0
            for i, site in enumerate(self._core.containers):
                container = Container(self, site, i, count)
                self._containers.append(container)
                count += len(container.images)
        return self._containers

    @classmethod
    def open(cls, path: str, scan: bool = False) -> "Binary":
        """Map and index `path`. With `scan`, also find containers by magic in every section."""
        return cls(_core.Binary.open(str(path), scan))

    @property
    def path(self) -> str:
        return self._core.path

    @property
    def format(self) -> str:
        """'elf', 'archive' or 'fatbin'."""
        return self._core.format

    @property
    def members(self) -> list[str]:
        """Archive member names."""
        return self._core.members

    @property
    def images(self) -> list[Image]:
        return [image for c in self.containers for image in c.images]

    def __iter__(self) -> Iterator[Image]:
        return iter(self.images)

    def load_code(self, images: list[Image] | None = None, threads: int = 0,
                  progress: Callable[[int, int], None] | None = None) -> list[str]:
        """Decode the kernels of `images` (default: all) in parallel (`threads` 0 = all cores).

        Returns the error messages of images that could not be decoded; the
        others have their `code` filled in.
        """
        images = self.images if images is None else images
        refs = [(image.container.index, image.entry.index) for image in images]
        results = self._core.device_code_of(refs, threads, progress)
        errors = []
        for image, result in zip(images, results):
            if isinstance(result, str):
                errors.append(result)
            else:
                image._code = result
        return errors


def open(path: str, scan: bool = False) -> Binary:  # noqa: A001 - the natural verb
    """Open a binary: `kir.open("app")`. Raises KirError on unreadable input."""
    return Binary.open(path, scan=scan)


__all__ = ["Binary", "Container", "Image", "KirError", "open"]
